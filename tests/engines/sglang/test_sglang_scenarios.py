"""SGLang engine scenarios with hand-computed expectations under a fixed 10 ms pass."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servesim.engines.base import EngineLimits
from servesim.engines.sglang.planner import default_chunked_prefill_size, default_mem_fraction_static
from servesim.engines.sglang.scheduler import SGLangEngine
from servesim.engines.sglang.options import SGLangOptions
from servesim.metrics.recorder import Status
from simharness import make_request, run

STEP = 0.01


def sglang(capacity: int = 200_000, context: int = 131072, chunk: int | None = 8192, **opts):
    options = SGLangOptions(**opts)

    def factory(wid, rec):
        return SGLangEngine(wid, rec, EngineLimits(capacity, context), options, chunk)

    return factory


def col(rec, name):
    return rec.column(name)


def test_long_prompt_is_split_into_chunks():
    # 10,000 prompt tokens with a 4,096-token chunk budget: passes of 4096, 4096, 1808.
    rec, (w,) = run(sglang(chunk=4096), [make_request(0, 0.0, 10_000, 5)])
    # three prefill chunks, four decode passes, and the overlap loop's decode of the request
    # it does not yet know finished (engines/sglang/overlap.py)
    assert w.passes == 3 + 4 + 1
    assert col(rec, "first_token")[0] == pytest.approx(3 * STEP)
    assert col(rec, "last_token")[0] == pytest.approx(7 * STEP)
    assert col(rec, "generated")[0] == 5


@pytest.mark.parametrize("overlap", [False, True])
def test_prefill_pass_stalls_running_decodes(overlap):
    # A decodes from t=0.01; B arrives at 0.025 during the decode pass [0.02, 0.03].  SGLang's
    # normal loop sees B when that pass ends and prefills it alone in [0.03, 0.04]; the overlap
    # loop had already chosen the decode pass [0.03, 0.04] when B arrived, so B's prefill runs
    # in [0.04, 0.05].  Either way A's next token comes 20 ms after the one before.
    a = make_request(0, 0.0, 100, 6)
    b = make_request(1, 0.025, 100, 3)
    rec, _ = run(sglang(disable_overlap_schedule=not overlap), [a, b])
    first_b = 0.05 if overlap else 0.04
    assert col(rec, "first_token")[1] == pytest.approx(first_b)
    assert col(rec, "first_token")[1] - col(rec, "arrival")[1] == pytest.approx(first_b - 0.025)
    # A's six tokens: one pass each plus B's prefill pass in between: the last at 0.07.
    assert col(rec, "last_token")[0] == pytest.approx(0.07)
    gaps, counts = rec.itl.arrays()
    assert gaps.max() == pytest.approx(0.02)


def test_repeated_prompt_hits_the_radix_cache():
    ids = (7, 8, 9)
    first = make_request(0, 0.0, 1500, 4, hash_ids=ids)
    again = make_request(1, 1.0, 1500, 4, hash_ids=ids)
    rec, _ = run(sglang(), [first, again])
    # At least one token is always recomputed: 1499 of 1500 come from the cache.
    assert col(rec, "cached_tokens").tolist() == [0, 1499]


def test_shared_prefix_of_two_blocks_is_reused_page_aligned():
    a = make_request(0, 0.0, 1500, 2, hash_ids=(1, 2, 3))
    b = make_request(1, 1.0, 1400, 2, hash_ids=(1, 2, 4))
    rec, _ = run(sglang(page_size=16), [a, b])
    assert col(rec, "cached_tokens").tolist() == [0, 1024]


def test_disabled_radix_cache_reuses_nothing():
    ids = (7, 8, 9)
    rec, _ = run(sglang(disable_radix_cache=True),
                 [make_request(0, 0.0, 1500, 4, hash_ids=ids), make_request(1, 1.0, 1500, 4, hash_ids=ids)])
    assert col(rec, "cached_tokens").tolist() == [0, 0]


def test_memory_pressure_retracts_the_request_with_least_progress():
    # Capacity 1,800 tokens.  A (200 in, 800 out) runs alone first; B arrives after ~100
    # decode passes when the decayed new_token_ratio lets it in, but the two together
    # peak at 999 + 899 KV tokens > 1,800: one must be retracted, and it is B (fewer tokens).
    a = make_request(0, 0.0, 200, 800)
    b = make_request(1, 1.0, 200, 800)
    rec, (w,) = run(sglang(capacity=1800), [a, b])
    assert col(rec, "retractions").tolist() == [0, 1]
    assert (col(rec, "status") == Status.COMPLETED).all()
    assert col(rec, "generated").tolist() == [800, 800]
    assert w.engine.pool.private_tokens == 0


def test_prompt_over_context_length_is_rejected():
    rec, _ = run(sglang(context=4096), [make_request(0, 0.0, 5000, 10), make_request(1, 0.0, 100, 3)])
    status = col(rec, "status").tolist()
    assert status == [Status.REJECTED, Status.COMPLETED]
    assert "exceeds the maximum input length" in rec.reason[0]


def test_head_of_line_request_blocks_smaller_ones_behind_it():
    # Capacity 3,000: A (1000+1000) runs; B (1500+1000) does not fit; C (10+10) would,
    # but FCFS admission stops at B.
    a = make_request(0, 0.0, 1000, 1000)
    b = make_request(1, 0.001, 1500, 1000)
    c = make_request(2, 0.002, 10, 10)
    rec, _ = run(sglang(capacity=3000), [a, b, c])
    first = col(rec, "first_token")
    # C gets in only together with B, once A has finished and freed its KV.
    assert first[2] == first[1]
    assert first[2] > col(rec, "finish")[0]


def test_lpm_prefers_the_request_with_the_longest_cached_prefix():
    seed = make_request(0, 0.0, 2048, 1, hash_ids=(1, 2, 3, 4))
    # Both arrive while `blocker` prefills; `hit` shares the whole cached prompt.
    blocker = make_request(1, 0.5, 8000, 1)
    miss = make_request(2, 0.505, 2048, 1, hash_ids=(50, 51, 52, 53))
    hit = make_request(3, 0.506, 2048, 1, hash_ids=(1, 2, 3, 4))
    rec, _ = run(sglang(schedule_policy="lpm", max_prefill_tokens=2048, chunk=None),
                 [seed, blocker, miss, hit])
    first = col(rec, "first_token")
    assert first[3] < first[2]
    rec_fcfs, _ = run(sglang(max_prefill_tokens=2048, chunk=None), [seed, blocker, miss, hit])
    first = col(rec_fcfs, "first_token")
    assert first[2] < first[3]


def test_sglang_defaults_follow_gpu_memory():
    assert default_chunked_prefill_size(80) == 8192
    assert default_chunked_prefill_size(141) == 8192
    assert default_chunked_prefill_size(180) == 16384
    assert default_mem_fraction_static(79.65, 8192, 1) == pytest.approx(0.835, abs=0.002)
    assert default_mem_fraction_static(140.4, 8192, 1) == pytest.approx(0.907, abs=0.002)


def test_fast_mode_matches_step_mode():
    rng = np.random.default_rng(3)
    reqs = []
    t = 0.0
    for i in range(60):
        t += float(rng.exponential(0.05))
        reqs.append(make_request(i, t, int(rng.integers(50, 3000)), int(rng.integers(1, 300)),
                                 block_size=512))
    from servesim.perf.simple import LinearStepTime

    st = LinearStepTime(base_s=0.004, per_prefill_token_s=2e-7, per_decode_request_s=3e-5, per_context_token_s=1e-8)
    slow, _ = run(sglang(capacity=30_000), reqs, step_time=st, fast=False)
    import copy
    fast, (w,) = run(sglang(capacity=30_000), copy.deepcopy(reqs), step_time=st, fast=True)
    for name in ("first_token", "second_token", "last_token", "finish"):
        np.testing.assert_allclose(fast.column(name), slow.column(name), rtol=1e-9, equal_nan=True)
    assert (fast.column("retractions") == slow.column("retractions")).all()
    assert math.isclose(fast.itl.arrays()[1].sum(), slow.itl.arrays()[1].sum())
