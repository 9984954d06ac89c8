"""TensorRT-LLM engine model under random workloads: invariants after every iteration,
exactly one terminal state per request, and fast-forward equal to step-by-step."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engines.base import EngineLimits
from servesim.engines.trtllm.scheduler import TRTLLMEngine
from servesim.engines.trtllm.options import TRTLLMOptions
from servesim.kvcache.policies import NextUseOracle
from servesim.metrics.recorder import RequestRecorder
from servesim.workload.request import Request
from simharness import drive_block_pool_engine, random_block_workload, simulate_one_worker

POLICIES = ["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"]


def random_engine(rng: random.Random, rec: RequestRecorder, reqs: list[Request]) -> TRTLLMEngine:
    tpb = rng.choice([1, 4, 16, 32])
    policy = rng.choice(["lru", "lru", "lfu", "fifo", "belady"])
    opt = TRTLLMOptions(
        tokens_per_block=tpb,
        max_num_tokens=rng.randint(tpb, 200),
        max_batch_size=rng.randint(1, 8),
        capacity_scheduler_policy=rng.choice(POLICIES),
        enable_chunked_context=rng.random() < 0.6,
        enable_block_reuse=rng.random() < 0.8,
        max_seq_len=rng.choice([None, rng.randint(32, 300)]),
        eviction_policy=policy,
        batch_wait_timeout_iters=rng.choice([0, 0, 3, 20]),
        batch_wait_max_tokens_ratio=rng.choice([0.0, 0.5, 0.9]),
    )
    kv = tpb * rng.randint(2, 40) + rng.randint(0, tpb - 1)
    oracle = NextUseOracle(reqs) if policy == "belady" else None
    return TRTLLMEngine(0, rec, EngineLimits(kv_capacity_tokens=kv, context_length=4096), opt, oracle)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 10))
def test_random_workloads_keep_invariants(seed: int, n: int) -> None:
    rng = random.Random(seed)
    reqs = random_block_workload(rng, n)
    rec = RequestRecorder()
    eng = random_engine(rng, rec, reqs)
    drive_block_pool_engine(eng, rec, reqs, rng)


def simulate(reqs, opt: TRTLLMOptions, kv: int, fast: bool) -> RequestRecorder:
    return simulate_one_worker(TRTLLMEngine, reqs, opt, kv, fast)


def test_fast_forward_equals_step_mode() -> None:
    cases = [(1, 16, 60, "GUARANTEED_NO_EVICT", True), (2, 4, 150, "MAX_UTILIZATION", True),
             (3, 32, 40, "MAX_UTILIZATION", False), (4, 16, 400, "GUARANTEED_NO_EVICT", False),
             (5, 16, 400, "GUARANTEED_NO_EVICT", True, {"batch_wait_timeout_iters": 10,
                                                       "batch_wait_max_tokens_ratio": 0.8,
                                                       "enable_block_reuse": False}),
             (6, 32, 60, "GUARANTEED_NO_EVICT", False, {"batch_wait_timeout_iters": 4,
                                                       "batch_wait_max_tokens_ratio": 0.9})]
    for seed, tpb, kv_blocks, policy, chunked, *extra in cases:
        rng = random.Random(seed)
        reqs = random_block_workload(rng, 60, max_in=250, max_out=120)
        for j, r in enumerate(reqs):
            r.arrival = 0.3 * j + r.arrival
        opt = TRTLLMOptions(tokens_per_block=tpb, max_num_tokens=256, max_batch_size=16,
                            capacity_scheduler_policy=policy, enable_chunked_context=chunked,
                            **(extra[0] if extra else {}))
        a = simulate(reqs, opt, kv_blocks * tpb, fast=False)
        b = simulate(reqs, opt, kv_blocks * tpb, fast=True)
        for name in ("first_token", "second_token", "last_token", "finish"):
            np.testing.assert_allclose(a.column(name), b.column(name), rtol=1e-9, err_msg=name)
        for name in ("generated", "retractions", "cached_tokens", "status"):
            assert a.column(name).tolist() == b.column(name).tolist(), name
