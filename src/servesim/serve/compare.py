"""Served against offline: replay what a load test sent through ``servesim predict`` and compare.

The same requests (prompt block ids, output lengths) at the same arrival times, converted to
virtual seconds, go through an ordinary offline run of the same config; the client's measured
TTFT and inter-token gaps (wall seconds × ``speed``) are then compared with the predicted ones.
The served numbers add the real HTTP stack's own latency; the offline run models none of it
(the config's client/frontend stages are turned off for the comparison).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servesim.api import predict
from servesim.metrics.stats import weighted_percentile
from servesim.serve.loadgen import Outcome, PlannedRequest
from servesim.serve.prompts import PromptEncoder


@dataclass
class Distribution:
    """Median, p90 and mean of one latency (seconds)."""

    p50: float
    p90: float
    mean: float

    @classmethod
    def of(cls, values, weights=None) -> "Distribution":
        v = np.asarray(values, dtype=float)
        w = np.ones(v.size, dtype=np.int64) if weights is None else np.asarray(weights, dtype=np.int64)
        order = np.argsort(v, kind="stable")
        v, w = v[order], w[order]
        return cls(weighted_percentile(v, w, 50), weighted_percentile(v, w, 90), float(np.average(v, weights=w)))


@dataclass
class Comparison:
    served_ttft: Distribution
    offline_ttft: Distribution
    served_itl: Distribution
    offline_itl: Distribution


def offline_run(config: dict, plan: list[PlannedRequest], outcomes: list[Outcome], start: float, speed: float,
                block_size: int):
    """The offline prediction of the requests as they were sent (arrival = send time × speed)."""
    enc = PromptEncoder(block_size)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "served.jsonl"
        with open(trace, "w") as fh:
            for req, out in sorted(zip(plan, outcomes), key=lambda p: p[1].sent):
                prompt = enc.encode_ids(req.prompt_ids)
                fh.write(json.dumps({"timestamp": (out.sent - start) * speed * 1000.0,
                                     "input_length": prompt.input_length, "output_length": req.max_tokens,
                                     "hash_ids": list(prompt.hash_ids)}) + "\n")
        cfg = json.loads(json.dumps(config))
        cfg["workload"] = {"kind": "trace", "path": str(trace), "block_size": block_size}
        cfg["output"] = {"dir": None, "timeseries": True, "timeseries_interval_s": 0.05}
        return predict(cfg)


def compare(config: dict, plan: list[PlannedRequest], outcomes: list[Outcome], start: float, speed: float,
            block_size: int) -> tuple[Comparison, object]:
    """Served and offline TTFT and inter-token gaps, in virtual seconds; also the offline prediction."""
    pred = offline_run(config, plan, outcomes, start, speed, block_size)
    rec = pred.recorder
    gaps, counts = rec.itl.arrays()  # every inter-token gap of the run, as (value, count) pairs
    return Comparison(
        served_ttft=Distribution.of([o.ttft * speed for o in outcomes]),
        offline_ttft=Distribution.of(rec.column("first_token") - rec.column("arrival")),
        served_itl=Distribution.of([g * speed for o in outcomes for g in o.gaps()]),
        offline_itl=Distribution.of(gaps, counts),
    ), pred
