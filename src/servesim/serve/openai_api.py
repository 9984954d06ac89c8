"""The OpenAI request and response shapes ``servesim serve`` speaks, apart from HTTP.

Parsing checks what the simulation needs and says plainly what it cannot serve (one prompt
per request, ``n`` = 1).  Responses carry OpenAI's fields and a ``usage`` block; the generated
text is filler, one :data:`FILLER_TOKEN` per token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from servesim.serve.prompts import EncodedPrompt, PromptEncoder

#: The text of one generated token (a single token in common BPE vocabularies).
FILLER_TOKEN = " token"
#: ``max_tokens`` when a completions request gives none (OpenAI's default).
COMPLETIONS_DEFAULT_MAX_TOKENS = 16


class RequestError(ValueError):
    """A request the server answers with HTTP 400 (or ``status``), in OpenAI's error shape."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.status = status

    def body(self) -> dict:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": str(self), "type": kind, "param": self.param, "code": self.status}}


@dataclass
class ParsedRequest:
    """What a completions or chat request asks of the fleet."""

    chat: bool
    prompt: EncodedPrompt
    max_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    model: str


class OutputLengths:
    """How many tokens a request generates.

    With ``ignore_eos`` (vLLM's and SGLang's extension, which benchmark clients set), exactly
    ``max_tokens``.  Otherwise the simulated model "stops" at a natural length drawn from a
    geometric distribution with mean ``eos_mean_tokens`` (seeded: the same sequence of requests
    gets the same lengths), capped by ``max_tokens``; ``eos_mean_tokens`` = 0 never stops early.
    """

    def __init__(self, eos_mean_tokens: float, seed: int) -> None:
        if eos_mean_tokens < 0:
            raise ValueError(f"--eos-mean-tokens must be >= 0, got {eos_mean_tokens}")
        self.eos_mean_tokens = eos_mean_tokens
        self.rng = np.random.default_rng(seed)

    def draw(self, max_tokens: int, ignore_eos: bool) -> tuple[int, str]:
        """(tokens to generate, finish reason)."""
        if ignore_eos or self.eos_mean_tokens == 0:
            return max_tokens, "length"
        natural = int(self.rng.geometric(1.0 / max(self.eos_mean_tokens, 1.0)))
        return (natural, "stop") if natural < max_tokens else (max_tokens, "length")


def _positive_int(body: dict, key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RequestError(f"'{key}' must be a positive integer, got {value!r}", key)
    return value


def parse_request(body: object, chat: bool, encoder: PromptEncoder, served_models: set[str],
                  default_max_tokens: int) -> ParsedRequest:
    """Check a request body and encode its prompt."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and model not in served_models:
        raise RequestError(f"The model `{model}` does not exist; this server serves {sorted(served_models)}",
                           "model", status=404)
    n = body.get("n", 1)
    if n != 1:
        raise RequestError("servesim serves one choice per request ('n' must be 1)", "n")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("'messages' must be a non-empty list", "messages")
        try:
            prompt = encoder.encode_chat(messages)
        except (ValueError, AttributeError) as exc:
            raise RequestError(f"'messages': {exc}", "messages") from None
        max_tokens = _positive_int(body, "max_completion_tokens") or _positive_int(body, "max_tokens")
    else:
        prompt = _encode_prompt(body.get("prompt"), encoder)
        max_tokens = _positive_int(body, "max_tokens") or COMPLETIONS_DEFAULT_MAX_TOKENS
    stream = bool(body.get("stream", False))
    options = body.get("stream_options") or {}
    return ParsedRequest(chat=chat, prompt=prompt, max_tokens=max_tokens or default_max_tokens,
                         ignore_eos=bool(body.get("ignore_eos", False)), stream=stream,
                         include_usage=bool(options.get("include_usage", False)) if stream else True,
                         model=model or next(iter(sorted(served_models))))


def _encode_prompt(prompt: object, encoder: PromptEncoder) -> EncodedPrompt:
    """A completions prompt: text, token ids, or a list holding one of them."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return encoder.encode_text(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return encoder.encode_ids(prompt)
    raise RequestError("'prompt' must be a string, a non-empty list of token ids, or a list holding one of "
                       "them (servesim serves one prompt per request)", "prompt")


# -- responses ---------------------------------------------------------------------------
def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def chunk(request_id: str, model: str, chat: bool, text: str | None, finish_reason: str | None,
          role: bool = False) -> dict:
    """One streamed chunk (``text`` None: a chunk with no content, e.g. the role or the finish)."""
    if chat:
        delta: dict = {}
        if role:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
        obj = "text_completion"
    return {"id": request_id, "object": obj, "created": int(time.time()), "model": model, "choices": [choice]}


def usage_chunk(request_id: str, model: str, chat: bool, use: dict) -> dict:
    return {"id": request_id, "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()), "model": model, "choices": [], "usage": use}


def full_response(request_id: str, model: str, chat: bool, tokens: int, finish_reason: str, use: dict) -> dict:
    """A non-streamed response."""
    text = FILLER_TOKEN * tokens
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                  "finish_reason": finish_reason}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        obj = "text_completion"
    return {"id": request_id, "object": obj, "created": int(time.time()), "model": model, "choices": [choice],
            "usage": use}
