"""Simulate one measured point with a frontend in front of the engine.

:class:`FrontendSimulation` is the simulation loop plus the :class:`~servesim.perf.frontend.Frontend`
stage: a request the client sends at ``t`` reaches the engine at ``frontend.admit_time(req, t)``
(serial tokenizer queue), while its recorded arrival stays ``t`` (the client's send time), so
TTFT includes the queueing.  Until the lead wires the frontend into ``sim/simulation.py``
(see docs/validation.md), validate and calibrate use this subclass.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from servesim.cluster.deployment import build_deployment
from servesim.config import load_config
from servesim.metrics.recorder import RequestRecorder, Status
from servesim.metrics.summary import request_latencies
from servesim.perf.frontend import Frontend, FrontendParams
from servesim.sim.simulation import ARRIVAL, Simulation
from servesim.workload.source import build_source


class FrontendSimulation(Simulation):
    """The simulation loop with a frontend stage between the client and the router."""

    def __init__(self, *args, frontend: Frontend, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.frontend = frontend
        self._sent: dict[int, float] = {}

    def _handle_arrival(self, req, now: float) -> None:
        sent = self._sent.pop(req.index, None)
        if sent is None:  # the client sent it now: it goes through the frontend first
            if self._lookahead is req:
                self._lookahead = None
            self._sent[req.index] = now
            self.events.push(self.frontend.admit_time(req, now), 1, ARRIVAL, req)
            return
        super()._handle_arrival(req, now)
        self.rec.arrived(req.index, sent)  # TTFT counts from the client's send


@dataclass
class PointResult:
    ttft_ms: float
    tpot_ms: float
    tput_per_gpu: float
    completed: int
    host_seconds: float


def build_config(config: dict[str, Any], analytic: dict[str, Any] | None = None,
                 num_prompts: int | None = None, warmup: int | None = None):
    data = dict(config)
    data["perf"] = {"model": "analytic", "params": dict(analytic or {})}
    if num_prompts is not None or warmup is not None:
        wl = dict(data["workload"])
        if num_prompts is not None:
            wl["num_prompts"] = num_prompts
        if warmup is not None:
            wl["warmup"] = warmup
        data["workload"] = wl
    return load_config(data)


def simulate_point(config: dict[str, Any], analytic: dict[str, Any] | None = None,
                   frontend: FrontendParams | dict | None = None, num_prompts: int | None = None,
                   warmup: int | None = None) -> PointResult:
    """Mean TTFT and TPOT (ms, as the benchmark computes them) and total tokens/s per GPU."""
    t0 = time.perf_counter()
    cfg = build_config(config, analytic, num_prompts, warmup)
    fe = Frontend(frontend if frontend is not None else FrontendParams.zero())
    source = build_source(cfg.workload, cfg.seed, None)
    dep = build_deployment(cfg)
    dep.step_time = fe.wrap_step_time(dep.step_time)
    rec = RequestRecorder()
    workers = dep.make_workers(rec, fast_forward=cfg.simulation.mode == "fast")
    sim = FrontendSimulation(requests=source.requests(), mode=source.mode, concurrency=source.concurrency,
                             workers=workers, router=dep.make_router(cfg.seed), recorder=rec,
                             max_sim_time=cfg.simulation.max_sim_time_s, frontend=fe)
    sim.run()
    fe.apply_stream_latency(rec)
    return score(rec, dep.total_gpus, time.perf_counter() - t0)


def score(rec: RequestRecorder, total_gpus: int, host_seconds: float = 0.0) -> PointResult:
    """Benchmark-style means over completed measured requests.

    TPOT per request = (e2e − TTFT) / (output tokens − 1) = (last − first) / (generated − 1).
    """
    lat = request_latencies(rec)
    done = (rec.column("status") == Status.COMPLETED) & ~rec.is_warmup
    n = int(done.sum())
    if n == 0:
        return PointResult(math.nan, math.nan, math.nan, 0, host_seconds)
    ttft = lat["ttft"][done]
    tpot = lat["tpot"][done]
    tpot = tpot[~np.isnan(tpot)]
    arrival = rec.column("arrival")[done]
    finish = rec.column("finish")[done]
    span = float(finish.max() - arrival.min())
    tokens = float(rec.column("input_length")[done].sum() + rec.column("generated")[done].sum())
    return PointResult(ttft_ms=float(ttft.mean()) * 1e3,
                       tpot_ms=float(tpot.mean()) * 1e3 if tpot.size else math.nan,
                       tput_per_gpu=tokens / span / total_gpus if span > 0 else math.nan,
                       completed=n, host_seconds=host_seconds)
