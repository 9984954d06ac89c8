"""The maximum-sustainable-rate search lands within 5% of a fine manual scan."""

from __future__ import annotations

import numpy as np
import pytest

from servesim.plan.maxload import evaluate_load, find_max_load


def test_max_rate_matches_a_fine_scan(base):
    from servesim.config import load_config

    base["workload"]["num_requests"] = 240
    base["deployment"]["workers"] = 2
    base["slo"] = {"ttft_ms": {"p90": 150}, "target": 0.9}
    res = find_max_load(base, rel_tol=0.02)
    assert res.knob == "workload.arrival.rate"
    assert res.max_load is not None and res.first_failing > res.max_load
    assert (res.first_failing - res.max_load) <= 0.02 * res.first_failing + 1e-9
    # the fine scan: every 2% from well below to well above the answer
    cfg = load_config(base)
    scan = res.max_load * np.arange(0.8, 1.25, 0.02)
    passing = [r for r in scan if evaluate_load(cfg, "workload.arrival.rate", float(r))["passes"]]
    best = max(passing)
    assert res.max_load == pytest.approx(best, rel=0.05)


def test_concurrency_knob_is_whole_numbers(base):
    base["workload"] = {"kind": "closed_loop", "recipe": "fixed", "num_prompts": 96, "warmup": 0,
                        "concurrency": 4, "isl": 1000, "osl": 100}
    base["slo"] = {"tpot_ms": {"p90": 12}}
    res = find_max_load(base)
    assert res.knob == "workload.concurrency"
    assert isinstance(res.max_load, int) and res.first_failing == res.max_load + 1
    assert all(isinstance(e["load"], int) for e in res.evaluations)
