"""SGLang's scheduler_recv_interval: arrivals wait for the scheduler's next pull."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from servesim.engines.base import EngineLimits
from servesim.engines.recv_interval import OTHER_WEIGHT, RecvSkipper
from servesim.engines.sglang import SGLangEngine
from servesim.engines.sglang_options import SGLangOptions
from servesim.errors import ConfigError
from servesim.metrics.recorder import Status
from servesim.perf.simple import LinearStepTime
from simharness import make_request, run

STEP = 0.01


def sglang(interval: int, capacity: int = 200_000, chunk: int | None = 8192, overlap: bool = True):
    options = SGLangOptions(scheduler_recv_interval=interval, disable_overlap_schedule=not overlap)

    def factory(wid, rec):
        return SGLangEngine(wid, rec, EngineLimits(capacity, 131072), options, chunk)

    return factory


def test_counter_follows_sglangs_weights():
    r = RecvSkipper(4)
    assert [r.tick(True) for _ in range(4)] == [False, False, False, True]  # every 4th decode iteration
    assert r.tick(False) is True and r.counter == 0  # after a prefill the next iteration pulls
    assert OTHER_WEIGHT >= 4
    r.tick(None)
    assert r.decode_passes_before_pull() == 3


def test_skipping_iterations_equals_ticking_them():
    for start in range(5):
        for k in range(12):
            a, b = RecvSkipper(5), RecvSkipper(5)
            a.counter = b.counter = start
            a.skip_decode_iterations(k)
            for _ in range(k):
                b.tick(True)
            assert a.counter == b.counter, (start, k)


def test_arrival_during_decode_waits_for_the_pull():
    """One request decodes from t = 0.01; a second arrives at 0.015.  With an interval of 1
    its prefill runs in the next pass (ends 0.03); with 5 the scheduler pulls it only at the
    iteration after the 5th decode iteration since the pull that followed the prefill."""
    reqs = [make_request(0, 0.0, 100, 50), make_request(1, 0.015, 100, 5)]
    base, _ = run(sglang(1, overlap=False), copy.deepcopy(reqs), step=STEP, fast=False)
    assert base.column("first_token")[1] == pytest.approx(0.03)
    # the overlap loop chose the pass [.02, .03] before r1 arrived: r1 is prefilled after it
    base, _ = run(sglang(1), copy.deepcopy(reqs), step=STEP, fast=False)
    assert base.column("first_token")[1] == pytest.approx(0.04)
    rec, _ = run(sglang(5), copy.deepcopy(reqs), step=STEP, fast=False)
    # passes: prefill r0 [0, .01], decodes from .01; the pull after the prefill (at .01) reset
    # the counter; iterations at .02 .03 .04 .05 count 1..4, the one at .06 counts 5 and pulls:
    # r1's prefill runs [.06, .07]
    assert rec.column("first_token")[1] == pytest.approx(0.07)
    assert (rec.column("status") == Status.COMPLETED).all()


def test_idle_server_pulls_at_once():
    reqs = [make_request(0, 0.0, 100, 3), make_request(1, 0.5, 100, 3)]
    rec, _ = run(sglang(30), reqs, step=STEP, fast=False)
    assert rec.column("first_token")[1] == pytest.approx(0.51)


@pytest.mark.parametrize("interval", [2, 10, 30])
def test_fast_mode_matches_step_mode(interval):
    rng = np.random.default_rng(interval)
    reqs, t = [], 0.0
    for i in range(60):
        t += float(rng.exponential(0.05))
        reqs.append(make_request(i, t, int(rng.integers(50, 3000)), int(rng.integers(1, 300)), block_size=512))
    st = LinearStepTime(base_s=0.004, per_prefill_token_s=2e-7, per_decode_request_s=3e-5, per_context_token_s=1e-8)
    slow, _ = run(sglang(interval, capacity=30_000), reqs, step_time=st, fast=False)
    fast, _ = run(sglang(interval, capacity=30_000), copy.deepcopy(reqs), step_time=st, fast=True)
    for name in ("first_token", "second_token", "last_token", "finish"):
        np.testing.assert_allclose(fast.column(name), slow.column(name), rtol=1e-9, equal_nan=True)
    assert (fast.column("status") == Status.COMPLETED).all()
    # the interval delays first tokens relative to polling every iteration
    every, _ = run(sglang(1, capacity=30_000), copy.deepcopy(reqs), step_time=st, fast=True)
    assert np.nanmean(fast.column("first_token")) > np.nanmean(every.column("first_token"))


def test_rejected_with_dp_attention():
    from servesim.cluster.deployment import build_deployment
    from servesim.config import load_config

    cfg = load_config({"deployment": {"model": "deepseek-ai/DeepSeek-R1", "gpu": "b200_sxm", "tp": 1,
                                      "attention_dp": 8, "ep": 8, "weight_dtype": "fp8",
                                      "engine": {"name": "sglang", "scheduler_recv_interval": 30}},
                       "workload": {"kind": "synthetic", "num_requests": 2, "arrival": {"process": "poisson", "rate": 1.0},
                                    "input": {"dist": "fixed", "value": 100},
                                    "output": {"dist": "fixed", "value": 10}}})
    with pytest.raises(ConfigError, match="scheduler_recv_interval"):
        build_deployment(cfg)
