"""The HTTP side of ``servesim serve`` (aiohttp, the ``serve`` extra).

Endpoints, as vLLM's and SGLang's OpenAI servers offer them: ``POST /v1/completions`` and
``POST /v1/chat/completions`` (streamed as server-sent events with ``stream: true``),
``GET /v1/models``, ``GET /health`` and ``GET /metrics``.  A request is submitted to the live
fleet when it arrives; a streamed response writes each pass's tokens when the pass ends in
the simulation, a plain response answers when the request ends.  A request the engine rejects
at once (a prompt longer than the context allows) is answered with HTTP 400, as vLLM does.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

from aiohttp import web

from servesim.serve.fleet import LiveFleet, Stream, StreamEvent
from servesim.serve.metrics import ServeMetrics
from servesim.serve.openai_api import (FILLER_TOKEN, OutputLengths, ParsedRequest, RequestError, chunk,
                                       full_response, parse_request, usage, usage_chunk)
from servesim.serve.prompts import PromptEncoder


@dataclass
class Endpoint:
    """What one HTTP server serves: the whole fleet through its router, or one worker."""

    fleet: LiveFleet
    encoder: PromptEncoder
    lengths: OutputLengths
    metrics: ServeMetrics
    models: set[str]
    default_max_tokens: int
    worker: int | None = None


_ids = itertools.count()
ENDPOINT = web.AppKey("endpoint", Endpoint)


#: Largest request body (bytes): a 200k-token prompt sent as token ids is about 1.3 MB.
MAX_BODY_BYTES = 64 << 20


def build_app(ep: Endpoint) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[ENDPOINT] = ep
    app.router.add_post("/v1/completions", _completions)
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/health", _health)
    app.router.add_get("/metrics", _metrics)
    return app


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=False)


async def _chat(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=True)


async def _models(request: web.Request) -> web.Response:
    ep: Endpoint = request.app[ENDPOINT]
    data = [{"id": m, "object": "model", "owned_by": "servesim", "max_model_len": ep.default_max_tokens}
            for m in sorted(ep.models)]
    return web.json_response({"object": "list", "data": data})


async def _health(request: web.Request) -> web.Response:
    return web.Response(text="OK")


async def _metrics(request: web.Request) -> web.Response:
    ep: Endpoint = request.app[ENDPOINT]
    return web.Response(body=ep.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


def _error(exc: RequestError) -> web.Response:
    return web.json_response(exc.body(), status=exc.status)


async def _generate(request: web.Request, chat: bool) -> web.StreamResponse:
    ep: Endpoint = request.app[ENDPOINT]
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _error(RequestError("the request body is not valid JSON"))
    try:
        parsed = parse_request(body, chat, ep.encoder, ep.models, ep.default_max_tokens)
    except RequestError as exc:
        return _error(exc)
    tokens, finish = ep.lengths.draw(parsed.max_tokens, parsed.ignore_eos)
    rid = f"{'chatcmpl' if chat else 'cmpl'}-{next(_ids)}"
    stream = ep.fleet.submit(parsed.prompt, tokens, rid, ep.encoder.block_size, ep.worker, finish)
    if stream.status == "rejected":  # rejected on arrival: nothing was generated
        return _error(RequestError(f"request rejected by the engine: {stream.reason}"))
    try:
        if parsed.stream:
            return await _stream_response(request, ep, parsed, stream)
        return await _full_response(ep, parsed, stream)
    except BaseException:  # the client went away (or the server is stopping): abort, freeing its KV
        ep.fleet.cancel(stream)
        raise


async def _full_response(ep: Endpoint, parsed: ParsedRequest, stream: Stream) -> web.Response:
    while True:
        ev: StreamEvent = await stream.queue.get()
        if ev.kind == "end":
            break
    if stream.status != "completed":
        raise_status = 400 if stream.status == "rejected" else 503
        return _error(RequestError(f"request {stream.status}: {stream.reason}", status=raise_status))
    use = _usage(ep, stream)
    return web.json_response(full_response(stream.request.request_id, parsed.model, parsed.chat, stream.delivered,
                                           stream.finish_reason, use))


def _usage(ep: Endpoint, stream: Stream) -> dict:
    cached = int(ep.fleet.recorder.column("cached_tokens")[stream.request.index])
    return usage(stream.request.input_length, stream.delivered, cached)


def _sse(obj: dict | str) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


async def _stream_response(request: web.Request, ep: Endpoint, parsed: ParsedRequest,
                           stream: Stream) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    try:
        await _write_events(resp, ep, parsed, stream)
    except ConnectionResetError:  # the client closed its stream: an ordinary end, not a server error
        ep.fleet.cancel(stream)
    return resp


async def _write_events(resp: web.StreamResponse, ep: Endpoint, parsed: ParsedRequest, stream: Stream) -> None:
    """Writes the stream's events as server-sent events until it ends, then ``[DONE]``."""
    rid, model, chat = stream.request.request_id, parsed.model, parsed.chat
    first = True
    while True:
        ev: StreamEvent = await stream.queue.get()
        if ev.kind == "tokens":
            await resp.write(_sse(chunk(rid, model, chat, FILLER_TOKEN * ev.tokens, None, role=first)))
            first = False
            continue
        if stream.status == "completed":
            await resp.write(_sse(chunk(rid, model, chat, None if chat else "", stream.finish_reason)))
            if parsed.include_usage:
                await resp.write(_sse(usage_chunk(rid, model, chat, _usage(ep, stream))))
        else:
            err = RequestError(f"request {stream.status}: {stream.reason}",
                               status=400 if stream.status == "rejected" else 503)
            await resp.write(_sse(err.body()))
        break
    await resp.write(_sse("[DONE]"))
    await resp.write_eof()
