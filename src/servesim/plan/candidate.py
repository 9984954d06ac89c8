"""One sweep candidate: the base config with some keys set, checked, simulated, reduced to a row.

:func:`evaluate` is what an executor runs (in a worker process or a Ray task): it takes a plain
mapping and returns a plain mapping, so that it crosses process boundaries unchanged, and its
result depends only on the candidate (the config's own seed drives the run).
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from servesim.errors import ServesimError

#: Metric columns of candidates.parquet (NaN when not measured: infeasible, failed, no SLO, no price).
METRIC_COLUMNS = ("throughput_per_gpu_tok_s", "per_user_tok_s", "goodput_rps", "goodput_tok_s",
                  "slo_attainment", "cost_per_hour_usd", "cost_per_mtok_usd", "ttft_p90_ms", "tpot_p90_ms",
                  "energy_j_per_tok", "request_per_s", "output_tok_s")


def params_key(params: dict[str, Any]) -> str:
    """Canonical text of a candidate's parameters: equal for equal candidates (resume, dedupe)."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


def candidate_overrides(params: dict[str, Any]) -> list[str]:
    """``KEY=VALUE`` overrides; JSON is YAML, so any value (a mapping too) round-trips."""
    return [f"{k}={json.dumps(v)}" for k, v in params.items()]


def load_candidate(base: dict, base_dir: str | None, params: dict[str, Any]):
    """The candidate's validated Config (ConfigError names the bad key)."""
    from pathlib import Path

    from servesim.config import load_config

    overrides = candidate_overrides(params) + ["output.timeseries=false", "output.kv_events=false"]
    cfg = load_config(base, overrides)
    if base_dir is not None:
        cfg._base_dir = Path(base_dir)
    return cfg


def check(base: dict, base_dir: str | None, params: dict[str, Any], gpu_budget: int | None,
          fill_budget: bool = False):
    """(cfg, gpus, None, extra) when the candidate can run, else (None, gpus or None, reason, extra).

    Builds the deployment without simulating: the model must fit the GPU's memory with room
    for KV (perf/memory.py), tp/ep/attention-DP must suit the model (cluster/deployment.py),
    and the fleet must stay within the GPU budget.  With ``fill_budget`` an aggregated
    deployment gets as many workers as the budget holds (``extra``: the keys this set).
    """
    from servesim.cluster.deployment import build_deployment

    extra: dict[str, Any] = {}
    try:
        cfg = load_candidate(base, base_dir, params)
        dep = build_deployment(cfg)
        if fill_budget and gpu_budget is not None and cfg.deployment.disaggregation is None:
            per_worker = dep.gpus_per_worker
            if per_worker > gpu_budget:
                return None, per_worker, f"one worker needs {per_worker} GPUs, over the budget of {gpu_budget}", extra
            extra = {"deployment.workers": gpu_budget // per_worker}
            cfg = load_candidate(base, base_dir, {**params, **extra})
            dep = build_deployment(cfg)
    except ServesimError as exc:
        return None, None, " ".join(str(exc).split()), extra
    gpus = int(dep.total_gpus)
    if gpu_budget is not None and gpus > gpu_budget:
        return None, gpus, f"needs {gpus} GPUs, over the budget of {gpu_budget} (sweep.gpu_budget)", extra
    return cfg, gpus, None, extra


def _num(v: Any) -> float:
    return float(v) if v is not None else math.nan


def metrics_row(summary: dict) -> dict[str, Any]:
    """The metric columns of one run's summary."""
    thr, lat = summary["throughput"], summary["latency"]
    slo = summary.get("slo")
    tpot_mean = lat["tpot_ms"].get("mean")
    row = {
        "gpus": int(summary["total_gpus"]),
        "throughput_per_gpu_tok_s": _num(thr.get("output_tokens_per_s_per_gpu")),
        "per_user_tok_s": 1000.0 / tpot_mean if tpot_mean else math.nan,
        "goodput_rps": _num(slo["goodput_request_per_s"]) if slo else math.nan,
        "goodput_tok_s": _num(slo["goodput_output_tokens_per_s"]) if slo else math.nan,
        "slo_attainment": _num(slo["attainment_all"]) if slo else math.nan,
        "cost_per_hour_usd": _num(summary["cost"]["usd_per_hour"]),
        "cost_per_mtok_usd": _num(summary["cost"]["usd_per_mtok"]),
        "ttft_p90_ms": _num(lat["ttft_ms"].get("p90")),
        "tpot_p90_ms": _num(lat["tpot_ms"].get("p90")),
        "energy_j_per_tok": _num(summary["energy"]["j_per_token"]),
        "request_per_s": _num(thr.get("request_per_s")),
        "output_tok_s": _num(thr.get("output_tokens_per_s")),
        "overloaded": bool(summary["overload"]["overloaded"]),
        "slo_met": bool(slo["met"]) if slo else False,
        "slo_violation": slo_violation(summary),
    }
    return row


def slo_violation(summary: dict) -> float:
    """How far the run is from meeting its SLO: <= 0 when every objective is met and the run
    is not overloaded; else the largest shortfall of attainment (+1 when overloaded)."""
    slo = summary.get("slo")
    gap = 0.0
    if slo is not None:
        gap = max(_share(o["percentile"]) - o["attainment"] for o in slo["objectives"])
    if summary["overload"]["overloaded"]:
        gap = max(gap, 0.0) + 1.0
    return float(gap)


def _share(pkey: str) -> float:
    from servesim.plan.slo import percentile_share

    return percentile_share(pkey)


def evaluate(task: dict) -> dict[str, Any]:
    """Run one candidate.  ``task``: candidate id, params, base config mapping, base_dir, gpu_budget,
    fill_budget.

    Returns the candidate's row: status ``infeasible`` (with the reason) when it cannot run,
    ``failed`` (with the error) when the simulation raised, else ``ok`` with its metrics.
    ``host_s`` is the wall time this took where it ran (kept in the journal, not in
    candidates.parquet, whose content depends only on the candidates).
    """
    t0 = time.perf_counter()
    row = _evaluate(task)
    row["host_s"] = time.perf_counter() - t0
    return row


def _evaluate(task: dict) -> dict[str, Any]:
    row: dict[str, Any] = {"candidate": task["candidate"], "params": task["params"], "status": "ok", "reason": ""}
    cfg, gpus, reason, extra = check(task["base"], task.get("base_dir"), task["params"], task.get("gpu_budget"),
                                     task.get("fill_budget", False))
    if extra:
        row["set"] = extra  # keys the sweep set itself (fill_budget): part of the candidate's config
    if reason is not None:
        row.update(status="infeasible", reason=reason, gpus=gpus)
        return row
    from servesim.api import predict

    try:
        pred = predict(cfg)
    except Exception as exc:  # a candidate's failure is recorded, not fatal to the sweep
        row.update(status="failed", reason=f"{type(exc).__name__}: {' '.join(str(exc).split())}", gpus=gpus)
        return row
    row.update(metrics_row(pred.summary))
    return row
