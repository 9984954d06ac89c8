"""The offline-optimal `belady` eviction policy through the whole pipeline."""

from __future__ import annotations

import pytest

import servesim

BASE = {
    "seed": 3,
    "workload": {
        "kind": "synthetic", "num_requests": 400,
        "arrival": {"process": "poisson", "rate": 12.0},
        "input": {"dist": "lognormal", "median": 1500, "sigma": 0.8, "max": 16000},
        "output": {"dist": "lognormal", "median": 250, "sigma": 0.7, "max": 2000},
        "prefix": {"num_groups": 8, "length": 1024, "share": 0.6},
    },
    "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "workers": 2},
    "perf": {"calibration": None},  # engine-only timing: the margin between policies is small
    "output": {"dir": None},
}


@pytest.mark.parametrize("engine", [
    {"name": "sglang", "mem_fraction_static": 0.25},
    {"name": "vllm", "gpu_memory_utilization": 0.3},
])
def test_belady_reuses_more_than_lru_under_a_small_kv_cache(engine):
    reuse = {}
    for policy in ("lru", "belady"):
        cfg = dict(BASE, deployment=dict(BASE["deployment"], engine=dict(engine, eviction_policy=policy)))
        pred = servesim.predict(cfg)
        assert pred.summary["requests"]["completed"] == 400
        reuse[policy] = pred.summary["cache"]["prefix_reuse_ratio"]
    assert reuse["belady"] > reuse["lru"] > 0
