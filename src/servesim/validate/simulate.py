"""Simulate one measured point through the same path as ``servesim predict``.

:func:`simulate_point` builds the point's config with explicit analytic and frontend
parameters (``perf.calibration: null`` plus ``perf.params`` / ``perf.frontend`` holding the
resolved values, so a fit can move them) and runs :func:`servesim.api.run_simulation`, which
puts the frontend stage between the client and the router.
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
from servesim.metrics.summary import measured_span, request_latencies
from servesim.perf.frontend import FrontendParams, running_at_first_token
from servesim.workload.source import build_source


@dataclass
class PointResult:
    ttft_ms: float
    tpot_ms: float
    tput_per_gpu: float
    completed: int
    host_seconds: float
    #: Mean over the completed measured requests of the requests decoding at their first token
    #: (:func:`servesim.perf.frontend.running_at_first_token`), counted on the run's final token
    #: times: in a run without ``stream_per_running_s`` (the sensitivity base runs) it is the TTFT
    #: slope of that parameter, which calibration fits without re-simulating.
    first_token_running: float = math.nan


def build_config(config: dict[str, Any], analytic: dict[str, Any] | None = None,
                 frontend: FrontendParams | dict | None = None,
                 num_prompts: int | None = None, warmup: int | None = None, perf_model: str = "analytic"):
    """The point's config with these parameters (``frontend`` None: the engine-only view).

    ``perf_model`` ``aic``: passes priced from aiconfigurator-core's measured tables
    (``analytic`` is then unused; the frontend stages still apply)."""
    data = dict(config)
    if frontend is None:
        fe = FrontendParams.zero()
    elif isinstance(frontend, FrontendParams):
        fe = frontend
    else:
        fe = FrontendParams.model_validate(frontend)
    if perf_model == "aic":
        data["perf"] = {"model": "aic", "frontend": fe.model_dump()}
    else:
        data["perf"] = {"model": "analytic", "calibration": None, "params": dict(analytic or {}),
                        "frontend": fe.model_dump()}
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
                   warmup: int | None = None, perf_model: str = "analytic") -> PointResult:
    """Mean TTFT and TPOT (ms, as the benchmark computes them) and total tokens/s per GPU."""
    from servesim.api import run_simulation

    t0 = time.perf_counter()
    cfg = build_config(config, analytic, frontend, num_prompts, warmup, perf_model)
    source = build_source(cfg.workload, cfg.seed, None)
    dep = build_deployment(cfg)
    rec, _ts, _stats = run_simulation(cfg, source, dep)
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
    span = measured_span(rec, ~rec.is_warmup, done)
    tokens = float(rec.column("input_length")[done].sum() + rec.column("generated")[done].sum())
    return PointResult(ttft_ms=float(ttft.mean()) * 1e3,
                       tpot_ms=float(tpot.mean()) * 1e3 if tpot.size else math.nan,
                       tput_per_gpu=tokens / span / total_gpus if span > 0 else math.nan,
                       completed=n, host_seconds=host_seconds,
                       first_token_running=float(running_at_first_token(rec)[done].mean()))
