"""Load-aware routing sees the same worker state in fast mode as pass by pass.

A decode stretch is committed at its end, so without settling a router reading a busy
worker mid-stretch sees the state of the stretch's start (its requests' remaining output,
its KV), places requests elsewhere than pass-by-pass simulation does, and every time after
that differs.  ``Worker.settle`` commits the passes that ended by the arrival first.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from servesim.api import predict
from servesim.cluster.routers import build_router
from servesim.cluster.kv_index import KVIndex

BASE = {
    "seed": 4,
    "workload": {"kind": "synthetic", "num_requests": 160, "arrival": {"process": "poisson", "rate": 12.0},
                 "input": {"dist": "uniform", "low": 200, "high": 2500},
                 "output": {"dist": "uniform", "low": 20, "high": 300},
                 "prefix": {"num_groups": 8, "length": 512, "share": 0.6}},
    "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "workers": 3},
    "output": {"dir": None, "timeseries": False},
}
COLUMNS = ("worker", "first_token", "second_token", "last_token", "finish", "retractions")


def _run(engine: str, router: str, mode: str, options: dict | None = None):
    c = copy.deepcopy(BASE)
    c["deployment"]["engine"] = {"name": engine}
    c["deployment"]["router"] = router
    c["deployment"]["router_options"] = options or {}
    c["simulation"] = {"mode": mode}
    return predict(c)


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
@pytest.mark.parametrize("router,options", [("least_loaded", {}), ("power_of_two", {}),
                                            ("kv_aware", {"decode_load": "kv"})])
def test_load_aware_routing_fast_equals_step(engine, router, options):
    fast, step = _run(engine, router, "fast", options), _run(engine, router, "step", options)
    assert sum(w.passes for w in fast.stats.workers) == sum(w.passes for w in step.stats.workers)
    workers = fast.recorder.column("worker")
    assert len(set(workers.tolist())) == 3  # the router spread the load
    for name in COLUMNS:
        np.testing.assert_allclose(fast.recorder.column(name), step.recorder.column(name), rtol=1e-9, atol=0,
                                   equal_nan=True, err_msg=name)
    assert fast.summary["requests"] == step.summary["requests"]


def test_fast_mode_still_uses_stretches_under_a_load_aware_router():
    """Settling cuts stretches at arrivals, it does not turn fast mode into step mode."""
    fast, step = _run("sglang", "least_loaded", "fast"), _run("sglang", "least_loaded", "step")
    assert fast.stats.events < 0.7 * step.stats.events


def test_routers_say_whether_they_read_worker_state():
    index = KVIndex()
    assert not build_router("round_robin", 0).reads_state
    assert not build_router("random", 0).reads_state
    assert build_router("least_loaded", 0).reads_state
    assert build_router("power_of_two", 0).reads_state
    assert build_router("kv_aware", 0, kv_index=index).reads_state
    assert build_router("session_affinity", 0).reads_state  # falls back to least_loaded
