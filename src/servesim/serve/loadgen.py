"""A small open-loop benchmark client for OpenAI-compatible servers (asyncio + aiohttp).

It sends each request of a plan at its planned wall time (open loop: a slow server does not
slow the sender), streams the answer and records, per request, when it was sent, when each
chunk of tokens arrived and how many tokens each chunk held.  Used by the ``servesim serve``
load test and ``benchmarks/bench_serve.py``, and usable against a real engine.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from dataclasses import dataclass, field

import aiohttp
import numpy as np


@dataclass
class PlannedRequest:
    """One request: when to send it (seconds after the start), its prompt ids and output length."""

    at: float
    prompt_ids: list[int]
    max_tokens: int


@dataclass
class Outcome:
    """What the client saw of one request (wall seconds, ``perf_counter`` clock)."""

    sent: float = 0.0
    chunks: list[tuple[float, int]] = field(default_factory=list)
    status: int = 0
    error: str = ""
    usage: dict | None = None

    @property
    def ttft(self) -> float:
        return self.chunks[0][0] - self.sent if self.chunks else float("nan")

    @property
    def tokens(self) -> int:
        return sum(n for _, n in self.chunks)

    def gaps(self) -> list[float]:
        """Inter-token gaps: each later chunk's wait, spread over its tokens."""
        out = []
        for (t0, _), (t1, n) in zip(self.chunks, self.chunks[1:]):
            out.extend([(t1 - t0) / n] * n)
        return out


def poisson_plan(n: int, rate: float, input_tokens: tuple[int, int], output_tokens: tuple[int, int],
                 seed: int, shared_prefix: int = 0) -> list[PlannedRequest]:
    """``n`` requests at Poisson times of ``rate`` per second, uniform lengths, an optional shared prefix."""
    rng = np.random.default_rng(seed)
    at = np.cumsum(rng.exponential(1.0 / rate, n))
    at -= at[0]
    prefix = list(range(1, shared_prefix + 1))
    plan = []
    for i in range(n):
        n_in = int(rng.integers(input_tokens[0], input_tokens[1] + 1))
        own = rng.integers(1000, 100_000, max(n_in - len(prefix), 1)).tolist()
        plan.append(PlannedRequest(float(at[i]), (prefix + own)[:max(n_in, 1)],
                                   int(rng.integers(output_tokens[0], output_tokens[1] + 1))))
    return plan


async def _one(session: aiohttp.ClientSession, url: str, model: str, req: PlannedRequest, start: float) -> Outcome:
    delay = start + req.at - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)
    out = Outcome(sent=time.perf_counter())
    body = {"model": model, "prompt": req.prompt_ids, "max_tokens": req.max_tokens, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    async with session.post(url + "/v1/completions", json=body) as resp:
        out.status = resp.status
        if resp.status != 200:
            out.error = await resp.text()
            return out
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            if "error" in data:
                out.error = data["error"]["message"]
            elif data.get("usage"):
                out.usage = data["usage"]
            elif data["choices"] and data["choices"][0]["text"]:
                out.chunks.append((time.perf_counter(), data["choices"][0]["text"].count(" token")))
    return out


async def run_plan(url: str, model: str, plan: list[PlannedRequest], timeout_s: float = 600.0) -> tuple[float, list[Outcome]]:
    """Send the plan; returns the start time (``perf_counter``) and each request's outcome."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        start = time.perf_counter() + 0.05
        outcomes = await asyncio.gather(*(_one(session, url, model, r, start) for r in plan))
    return start, list(outcomes)


def scrape_metrics(url: str, names: tuple[str, ...]) -> dict[str, float]:
    """The Prometheus families ``names`` of ``url``/metrics, each summed over its label sets
    (e.g. every worker's running requests)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        for name in names:
            if line.startswith(name + "{"):
                values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return values
