"""``servesim serve`` on loopback: a real OpenAI client, a real load, scraped metrics, KV events.

Timing runs slowed down (``speed`` < 1) so that the wall clock's own jitter on a busy machine
stays small against the simulated latencies; every comparison is in virtual seconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import urllib.request

import pytest

from servesim.config import load_config
from servesim.serve.compare import compare
from servesim.serve.loadgen import poisson_plan, run_plan, scrape_metrics
from servesim.serve.prompts import PromptEncoder
from servesim.serve.server import BackgroundServer, ServeOptions
from tests.serve.conftest import serve_config, served_process

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.read().decode()


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_openai_client_streams_a_chat_completion_timed_by_the_simulation() -> None:
    openai = pytest.importorskip("openai")
    speed = 0.25
    config = serve_config()
    messages = [{"role": "user", "content": "a" * 16000}]
    with BackgroundServer(load_config(config), ServeOptions(port=0, speed=speed, eos_mean_tokens=0)) as urls:
        client = openai.OpenAI(base_url=urls[0] + "/v1", api_key="unused")
        # Warm the client (its lazy imports of the streaming path, the connection) on another prompt
        # first: its first stream costs it about half a second before the request leaves.
        for _ in client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "warm"}],
                                                max_tokens=1, stream=True):
            pass
        time.sleep(0.2)
        sent = time.perf_counter()
        stream = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, stream=True,
                                                stream_options={"include_usage": True})
        arrivals, text, use = [], "", None
        for part in stream:
            if part.choices and part.choices[0].delta.content:
                arrivals.append(time.perf_counter())
                text += part.choices[0].delta.content
            if part.usage is not None:
                use = part.usage
    prompt = PromptEncoder(16).encode_chat(messages)
    assert use.prompt_tokens == prompt.input_length == 4002
    assert use.completion_tokens == 12 and text.count(" token") == 12
    # The same request offline.
    pred = _offline_one(config, prompt, 12)
    rec = pred.recorder
    ttft = float(rec.column("first_token")[0] - rec.column("arrival")[0])
    tpot = float((rec.column("last_token")[0] - rec.column("first_token")[0]) / 11)
    served_ttft = (arrivals[0] - sent) * speed
    served_tpot = (arrivals[-1] - arrivals[0]) / 11 * speed
    # The client's own cost per request (building it, parsing chunks) is tens of wall ms on a busy
    # machine: a few virtual ms at this speed.
    assert served_ttft == pytest.approx(ttft, rel=0.15, abs=0.015), (served_ttft, ttft)
    assert served_tpot == pytest.approx(tpot, rel=0.15, abs=0.002), (served_tpot, tpot)


def _offline_one(config: dict, prompt, output: int):
    from servesim.api import predict
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "one.jsonl"
        trace.write_text(json.dumps({"timestamp": 0, "input_length": prompt.input_length, "output_length": output,
                                     "hash_ids": list(prompt.hash_ids)}) + "\n")
        cfg = dict(config, workload={"kind": "trace", "path": str(trace), "block_size": 16})
        return predict(cfg)


def test_completions_models_health_and_errors() -> None:
    with BackgroundServer(load_config(serve_config()), ServeOptions(port=0, speed=20.0, eos_mean_tokens=0)) as urls:
        base = urls[0]
        assert _get(base + "/health")[0] == 200
        status, models = _get(base + "/v1/models")
        assert status == 200 and json.loads(models)["data"][0]["id"] == MODEL
        status, body = _post(base + "/v1/completions", {"model": MODEL, "prompt": list(range(50)), "max_tokens": 5})
        assert status == 200
        assert body["usage"] == {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55,
                                 "prompt_tokens_details": {"cached_tokens": 0}}
        assert body["choices"][0]["finish_reason"] == "length"
        # The same prompt again hits the prefix cache (its 3 full blocks of 16).
        status, body = _post(base + "/v1/completions", {"prompt": list(range(50)), "max_tokens": 2})
        assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 48
        status, body = _post(base + "/v1/completions", {"model": "other", "prompt": "hi"})
        assert status == 404 and "does not exist" in body["error"]["message"]
        status, body = _post(base + "/v1/completions", {"prompt": "hi", "n": 2})
        assert status == 400 and body["error"]["param"] == "n"
        status, body = _post(base + "/v1/completions", {"prompt": list(range(200_000)), "max_tokens": 4})
        assert status == 400 and "rejected" in body["error"]["message"]


def test_without_ignore_eos_requests_stop_early_and_say_so() -> None:
    opts = ServeOptions(port=0, speed=50.0, eos_mean_tokens=4)
    with BackgroundServer(load_config(serve_config()), opts) as urls:
        reasons = set()
        for _ in range(8):
            status, body = _post(urls[0] + "/v1/completions", {"prompt": "hello", "max_tokens": 64})
            assert status == 200
            reasons.add(body["choices"][0]["finish_reason"])
            n = body["usage"]["completion_tokens"]
            assert (n < 64) == (body["choices"][0]["finish_reason"] == "stop")
        assert "stop" in reasons
        status, body = _post(urls[0] + "/v1/completions", {"prompt": "hello", "max_tokens": 64, "ignore_eos": True})
        assert body["usage"]["completion_tokens"] == 64


def test_load_matches_offline_prediction_and_metrics_move(tmp_path) -> None:
    """A real load against ``servesim serve`` running in its own process, as a user runs it."""
    speed = 0.25  # slow motion: the wall clock's jitter shrinks by 4 in virtual time
    config = serve_config(workers=2)
    plan = poisson_plan(30, rate=6.0 * speed, input_tokens=(500, 3000), output_tokens=(16, 48), seed=3,
                        shared_prefix=256)
    gauges = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
    scraped: list[dict[str, float]] = []
    with served_process(config, tmp_path, "--speed", str(speed)) as url:
        stop = threading.Event()

        def scraper() -> None:
            while not stop.is_set():
                scraped.append(scrape_metrics(url, gauges))
                time.sleep(0.1)

        t = threading.Thread(target=scraper)
        t.start()
        try:
            start, outcomes = asyncio.run(run_plan(url, MODEL, plan))
        finally:
            stop.set()
            t.join()
        final = scrape_metrics(url, gauges + ("vllm:generation_tokens_total", "vllm:prefix_cache_hits_total"))
    assert all(o.status == 200 and not o.error for o in outcomes)
    assert [o.tokens for o in outcomes] == [r.max_tokens for r in plan]
    assert final["vllm:generation_tokens_total"] == sum(r.max_tokens for r in plan)
    assert final["vllm:prefix_cache_hits_total"] > 0  # the shared prefix hit
    assert final["vllm:num_requests_running"] == 0 and final["vllm:kv_cache_usage_perc"] == 0
    cmp, pred = compare(config, plan, outcomes, start, speed, 16)
    # Served against offline, in virtual seconds: within 20%, plus 10 ms (40 wall ms at this speed) for
    # the HTTP stack and the client's own Python on a busy 2-core machine.
    for served, offline in ((cmp.served_ttft, cmp.offline_ttft), (cmp.served_itl, cmp.offline_itl)):
        assert served.p50 == pytest.approx(offline.p50, rel=0.2, abs=0.01), cmp
        assert served.mean == pytest.approx(offline.mean, rel=0.2, abs=0.01), cmp
    # /metrics moved as the offline time series did: requests ran and queued, KV filled.
    running = [s.get("vllm:num_requests_running", 0) for s in scraped]
    kv = [s.get("vllm:kv_cache_usage_perc", 0) for s in scraped]
    ts = pred.timeseries.columns()
    assert max(running) >= 2 and len(set(running)) >= 3
    assert max(kv) > 0
    offline_peak = max(ts["running"]) * 1.0  # per worker; the scrape sums both workers
    assert max(running) <= 2 * offline_peak + 2


def test_kv_events_are_published_in_vllm_format() -> None:
    zmq = pytest.importorskip("zmq")
    import msgspec
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    opts = ServeOptions(port=0, speed=50.0, kv_events=f"tcp://127.0.0.1:{port}", eos_mean_tokens=0)
    # The engine's KV blocks (32 tokens) differ from the prompt blocks (--block-size 16): the
    # events carry the engine's, which is what their hashes cover.
    config = serve_config()
    config["deployment"]["engine"]["block_size"] = 32
    with BackgroundServer(load_config(config), opts) as urls:
        sub = zmq.Context.instance().socket(zmq.SUB)
        sub.connect(f"tcp://127.0.0.1:{port}")
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        time.sleep(0.3)  # let the subscription reach the publisher
        _post(urls[0] + "/v1/completions", {"prompt": list(range(64)), "max_tokens": 2})
        assert sub.poll(5000)
        topic, seq, payload = sub.recv_multipart()
        sub.close(linger=0)
    ts, events, rank = msgspec.msgpack.decode(payload)
    assert int.from_bytes(seq, "big") == 0 and rank == 0 and ts >= 0
    assert events[0][0] == "BlockStored"
    assert len(events[0][1]) >= 1 and events[0][4] == 32


def _gauge(text: str, name: str) -> float:
    """The first sample of metric ``name`` in a Prometheus exposition."""
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def _open_stream(url: str, body: dict):
    """POST ``body`` and return the open connection and response (nothing read yet)."""
    import http.client
    from urllib.parse import urlparse

    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    return conn


def _wait_for(predicate, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("stream", [True, False])
def test_client_disconnect_aborts_the_request_and_frees_its_kv(stream, caplog) -> None:
    """A client that hangs up mid-generation: the simulated engine drops the request at once
    (not after its remaining ~2000 tokens, tens of seconds away), /metrics shows the running
    count and KV usage fall back to zero, and the request ends cancelled, counted once.  The
    hang-up is an ordinary end, not a server error: nothing is logged at ERROR."""
    from servesim.metrics.recorder import Status

    bs = BackgroundServer(load_config(serve_config()), ServeOptions(port=0, speed=1.0, eos_mean_tokens=0))
    with bs as urls:
        conn = _open_stream(urls[0], {"prompt": list(range(3000)), "max_tokens": 2000, "ignore_eos": True,
                                      "stream": stream})
        if stream:
            resp = conn.getresponse()
            assert resp.status == 200
            got = [resp.fp.readline() for _ in range(6)]  # a few token chunks (and their blank lines)
            assert any(line.startswith(b"data: ") for line in got)
        assert _wait_for(lambda: _gauge(_get(urls[0] + "/metrics")[1], "vllm:num_requests_running") == 1)
        before = _get(urls[0] + "/metrics")[1]
        assert _gauge(before, "vllm:kv_cache_usage_perc") > 0
        conn.close()  # the client goes away
        assert _wait_for(lambda: _gauge(_get(urls[0] + "/metrics")[1], "vllm:num_requests_running") == 0)
        after = _get(urls[0] + "/metrics")[1]
        assert _gauge(after, "vllm:kv_cache_usage_perc") == 0.0
        rec = bs.call(lambda: bs.server.fleet.recorder)
        status = bs.call(lambda: int(rec.column("status")[0]))
        generated = bs.call(lambda: int(rec.column("generated")[0]))
        assert status == Status.CANCELLED and generated < 2000
        assert 'finished_reason="abort"' in after
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
        # its prompt stays cached: the same prompt again hits it
        code, body = _post(urls[0] + "/v1/completions", {"prompt": list(range(3000)), "max_tokens": 1})
        assert code == 200 and body["usage"]["prompt_tokens_details"]["cached_tokens"] >= 2992



def test_served_requests_leave_no_per_request_objects_behind(caplog) -> None:
    """A long-running server keeps no Python object per finished request: streams, engine
    records, metric timers and the simulation's bookkeeping are all let go when a request ends
    (what stays is its row of the recorder's numeric columns).  Serves two batches and checks
    that the live request objects do not grow with the number served."""
    import gc

    def live_requests() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects()  # servesim's own (aiohttp has a Request class too)
                   if type(o).__name__ in ("Request", "Stream", "VReq")
                   and str(type(o).__module__).startswith("servesim."))

    bs = BackgroundServer(load_config(serve_config()), ServeOptions(port=0, speed=50.0, eos_mean_tokens=0))
    with bs as urls:
        def serve(n: int) -> None:
            for i in range(n):
                code, _ = _post(urls[0] + "/v1/completions", {"prompt": [i, 1, 2, 3], "max_tokens": 3})
                assert code == 200
            # one disconnected stream too: aborted requests must let go as well
            conn = _open_stream(urls[0], {"prompt": list(range(50)), "max_tokens": 500, "stream": True})
            conn.getresponse().fp.readline()
            conn.close()
            assert _wait_for(lambda: bs.call(lambda: not bs.server.fleet.active))

        serve(20)
        after_few = bs.call(live_requests)
        serve(80)
        # an aborted stream's handler lets go of its objects a moment after the fleet does:
        # wait for the count to come back down (a leak of one per request never would)
        _wait_for(lambda: bs.call(live_requests) <= after_few)
        after_many = bs.call(live_requests)
        fleet = bs.server.fleet
        state = bs.call(lambda: (len(fleet.active), len(fleet.observer._last_token_t), len(fleet.sim._aborts),
                                 len(fleet.sim._abort_on_arrival), fleet.workers[0].engine.has_work()))
    assert state == (0, 0, 0, 0, False)
    assert after_many <= after_few, (after_few, after_many)
    # a write to a stream whose client hung up ends its handler quietly (a logged traceback
    # would also keep the request's objects alive in the log record)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
