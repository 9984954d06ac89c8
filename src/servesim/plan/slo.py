"""Service-level objectives: per-request attainment and goodput.

An SLO names a latency metric, a percentile and a threshold: ``ttft_ms: {p90: 500}`` says
that 90% of requests must see a TTFT of at most 500 ms.  A request *meets* a metric when its
own value is at most the threshold; the metric's *attainment* is the share of requests that
meet it, and the metric is *met* when that share is at least the percentile (which is the
same as "the p90 is at most 500 ms").  Goodput counts the requests that meet every metric.

Which requests count: every measured (non-warm-up) request.  A rejected or unfinished
request meets nothing (it was not served); a metric that is undefined for a completed
request (TPOT of a one-token answer) does not count against it.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servesim.metrics.recorder import RequestRecorder, Status
from servesim.metrics.summary import measured_span, request_latencies

#: SLO metric key -> the per-request latency column of metrics.summary.request_latencies.
SLO_METRICS = {"ttft_ms": "ttft", "ttst_ms": "ttst", "tpot_ms": "tpot", "itl_ms": "mean_itl",
               "e2e_ms": "e2e", "queue_ms": "queue"}

_PERCENTILE = re.compile(r"^p(\d+(?:\.\d+)?)$")


def percentile_share(key: str) -> float:
    """``p90`` -> 0.90, ``p99.9`` -> 0.999, ``max`` -> 1.0; ValueError for anything else."""
    if key == "max":
        return 1.0
    m = _PERCENTILE.match(key)
    if not m or not 0 < float(m.group(1)) <= 100:
        raise ValueError(f"{key!r} is not a percentile: expected p50, p90, p99.9, ... or max")
    return float(m.group(1)) / 100.0


Thresholds = dict[str, float]


class SLOConfig(BaseModel):
    """``slo:``: thresholds in ms per metric and percentile, e.g. ``ttft_ms: {p90: 500}``."""

    model_config = ConfigDict(extra="forbid")

    ttft_ms: Thresholds | None = Field(None, description="time to first token")
    ttst_ms: Thresholds | None = Field(None, description="time to second token")
    tpot_ms: Thresholds | None = Field(None, description="time per output token after the first")
    itl_ms: Thresholds | None = Field(None, description="a request's mean inter-token gap")
    e2e_ms: Thresholds | None = Field(None, description="end-to-end latency")
    queue_ms: Thresholds | None = Field(None, description="arrival to first scheduled")
    target: float = Field(0.9, gt=0, le=1, description="share of requests that must meet every metric "
                                                        "(maximum sustainable load, sweeps' `meets SLA`)")

    @field_validator("ttft_ms", "ttst_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms")
    @classmethod
    def _percentiles(cls, v: Thresholds | None) -> Thresholds | None:
        if v is None:
            return v
        if not v:
            raise ValueError("give at least one percentile, e.g. {p90: 500}")
        for key, ms in v.items():
            percentile_share(key)
            if not ms > 0:
                raise ValueError(f"{key}: threshold must be > 0 ms, got {ms}")
        return v

    @model_validator(mode="after")
    def _some_metric(self) -> "SLOConfig":
        if not self.objectives():
            raise ValueError(f"name at least one metric: {', '.join(SLO_METRICS)}")
        return self

    def objectives(self) -> list[tuple[str, str, float, float]]:
        """(metric key, percentile key, share, threshold ms) for every objective."""
        out = []
        for metric in SLO_METRICS:
            for pkey, ms in (getattr(self, metric) or {}).items():
                out.append((metric, pkey, percentile_share(pkey), float(ms)))
        return out


def request_meets(rec: RequestRecorder, slo: SLOConfig,
                  lat: dict[str, np.ndarray] | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(measured mask, {"metric.percentile": whether each request is under that threshold}).

    ``lat``: :func:`request_latencies` of ``rec`` when the caller has it already."""
    lat = request_latencies(rec) if lat is None else lat
    served = rec.column("status") == Status.COMPLETED
    per: dict[str, np.ndarray] = {}
    for metric, pkey, _share, ms in slo.objectives():
        v = lat[SLO_METRICS[metric]] * 1000.0
        with np.errstate(invalid="ignore"):
            ok = served & (np.isnan(v) | (v <= ms))
        per[f"{metric}.{pkey}"] = ok
    return ~rec.is_warmup, per


def slo_summary(rec: RequestRecorder, slo: SLOConfig, total_gpus: int) -> dict[str, Any]:
    """The ``slo`` block of the summary: attainment per objective, share meeting all, goodput.

    A request meets *all* when it is within the threshold of every metric.  For a metric given
    at several percentiles (``{p50: 200, p99: 800}``) that is the threshold of its highest
    percentile: the p50 threshold is, by its nature, one that half the requests may exceed, so
    it is reported as attainment but does not disqualify a request.
    """
    lat = request_latencies(rec)
    measured, per = request_meets(rec, slo, lat)
    n = int(measured.sum())
    status = rec.column("status")
    done = (status == Status.COMPLETED) & measured
    objectives = []
    all_ok = measured.copy()
    top_share = {}
    for metric, _pkey, share, _ms in slo.objectives():
        top_share[metric] = max(top_share.get(metric, 0.0), share)
    met_all = True
    for metric, pkey, share, ms in slo.objectives():
        ok = per[f"{metric}.{pkey}"] & measured
        attained = float(ok.sum()) / n if n else 0.0
        v = lat[SLO_METRICS[metric]][done] * 1000.0
        v = v[~np.isnan(v)]
        observed = float(np.quantile(v, share)) if v.size else None
        met = attained >= share - 1e-12
        met_all &= met
        objectives.append({"metric": metric, "percentile": pkey, "threshold_ms": ms,
                           "observed_ms": observed, "attainment": attained, "met": met})
        if share == top_share[metric]:
            all_ok &= ok
    good = all_ok & measured
    span = measured_span(rec, measured, done)
    n_good = int(good.sum())
    good_out = int(rec.column("generated")[good].sum())
    share_all = n_good / n if n else 0.0
    rps = n_good / span if span > 0 else None
    tok = good_out / span if span > 0 else None
    return {
        "objectives": objectives,
        "met": bool(met_all),
        "requests_meeting_all": n_good,
        "attainment_all": share_all,
        "target": slo.target,
        "meets_target": share_all >= slo.target - 1e-12,
        "goodput_request_per_s": rps,
        "goodput_output_tokens_per_s": tok,
        "goodput_request_per_s_per_gpu": rps / total_gpus if rps is not None and total_gpus else None,
        "goodput_output_tokens_per_s_per_gpu": tok / total_gpus if tok is not None and total_gpus else None,
    }
