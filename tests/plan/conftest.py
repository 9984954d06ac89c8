"""A small deployment and workload shared by the planning tests (a candidate runs in ~0.1 s)."""

from __future__ import annotations

import copy

import pytest

BASE = {
    "seed": 3,
    "workload": {"kind": "synthetic", "num_requests": 160, "arrival": {"process": "poisson", "rate": 40.0},
                 "input": {"dist": "lognormal", "median": 1200, "sigma": 0.4, "max": 6000},
                 "output": {"dist": "lognormal", "median": 120, "sigma": 0.4, "max": 600}},
    "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "workers": 1},
    "output": {"dir": None, "timeseries": False},
    "slo": {"ttft_ms": {"p90": 120}},
}


@pytest.fixture
def base() -> dict:
    return copy.deepcopy(BASE)
