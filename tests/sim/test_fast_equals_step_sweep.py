"""Fast mode equals step mode across randomly combined options, not one engine feature at a time.

Each case draws an engine, a router (load-aware ones read workers mid-stretch), sessions or
a closed loop, a small KV pool (retractions, preemptions), a frontend (requests reach the
router late), the time series, KV events, KV event delays and a time limit, from a seeded
generator; the per-request columns and the time series must agree to 1e-9.
"""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

from servesim.api import predict

COLUMNS = ("worker", "first_scheduled", "first_token", "second_token", "last_token", "finish", "retractions",
           "emissions", "status", "cached_tokens")
SMALL_POOL = {"sglang": {"mem_fraction_static": 0.25}, "vllm": {"gpu_memory_utilization": 0.25},
              "trtllm": {"free_gpu_memory_fraction": 0.2}}


def random_config(rng: random.Random, engine: str) -> dict:
    workload = {"kind": "synthetic", "num_requests": 90, "arrival": {"process": "poisson", "rate": rng.choice([5.0, 20.0])},
                "input": {"dist": "uniform", "low": 100, "high": rng.choice([1500, 6000])},
                "output": {"dist": "uniform", "low": 1, "high": rng.choice([100, 400])},
                "prefix": {"num_groups": 4, "length": 512, "share": 0.5}}
    if rng.random() < 0.4:
        workload["sessions"] = {"turns": {"dist": "uniform", "low": 1, "high": 3},
                                "think_time_s": {"dist": "exponential", "mean": 1.0},
                                "new_input": {"dist": "uniform", "low": 50, "high": 300}}
    elif rng.random() < 0.3:
        workload = {"kind": "closed_loop", "recipe": "fixed", "concurrency": rng.choice([4, 32]), "num_prompts": 80,
                    "warmup": rng.choice([0, 4]), "isl": 1000, "osl": 150}
    router = rng.choice(["round_robin", "random", "least_loaded", "power_of_two", "kv_aware", "session_affinity"])
    deployment = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "workers": rng.choice([1, 2, 3]),
                  "router": router, "engine": {"name": engine, **(SMALL_POOL[engine] if rng.random() < 0.3 else {})}}
    if router == "kv_aware" and rng.random() < 0.5:
        deployment["kv_event_delay_s"] = 0.05
    cfg = {"seed": rng.randrange(100), "workload": workload, "deployment": deployment,
           "output": {"dir": None, "timeseries": rng.random() < 0.6, "timeseries_interval_s": rng.choice([0.2, 1.0]),
                      "kv_events": rng.random() < 0.3}}
    if rng.random() < 0.3:
        cfg["perf"] = {"model": "analytic", "frontend": {"request_overhead_s": 0.003, "scheduler_pass_s": 0.0005,
                                                         "stream_per_running_s": 1e-5}}
    if rng.random() < 0.2:
        cfg["simulation"] = {"max_sim_time_s": 5.0}
    return cfg


def _run(cfg: dict, mode: str):
    c = copy.deepcopy(cfg)
    c.setdefault("simulation", {})["mode"] = mode
    return predict(c)


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
@pytest.mark.parametrize("case", range(4))
def test_fast_equals_step_on_random_option_mixes(engine, case):
    cfg = random_config(random.Random(f"{engine}-{case}"), engine)
    fast, step = _run(cfg, "fast"), _run(cfg, "step")
    for name in COLUMNS:
        np.testing.assert_allclose(fast.recorder.column(name), step.recorder.column(name), rtol=1e-9, atol=0,
                                   equal_nan=True, err_msg=f"{name} of {cfg}")
    if fast.timeseries is not None:
        a, b = fast.timeseries.columns(), step.timeseries.columns()
        for name in b:
            np.testing.assert_allclose(a[name], b[name], rtol=1e-9, atol=0, err_msg=f"timeseries {name} of {cfg}")
