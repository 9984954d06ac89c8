"""TensorRT-LLM engine model under random workloads: invariants after every iteration,
exactly one terminal state per request, and fast-forward equal to step-by-step."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from blockkv_harness import assert_fast_equals_step, check_random_workload, limits, spread_workload
from servesim.engines.trtllm.scheduler import TRTLLMEngine
from servesim.engines.trtllm.options import TRTLLMOptions
from servesim.kvcache.policies import NextUseOracle
from servesim.metrics.recorder import RequestRecorder
from servesim.workload.request import Request

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
    return TRTLLMEngine(0, rec, limits(kv), opt, oracle)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 10))
def test_random_workloads_keep_invariants(seed: int, n: int) -> None:
    check_random_workload(random_engine, seed, n)


def test_fast_forward_equals_step_mode() -> None:
    cases = [(1, 16, 60, "GUARANTEED_NO_EVICT", True), (2, 4, 150, "MAX_UTILIZATION", True),
             (3, 32, 40, "MAX_UTILIZATION", False), (4, 16, 400, "GUARANTEED_NO_EVICT", False),
             (5, 16, 400, "GUARANTEED_NO_EVICT", True, {"batch_wait_timeout_iters": 10,
                                                       "batch_wait_max_tokens_ratio": 0.8,
                                                       "enable_block_reuse": False}),
             (6, 32, 60, "GUARANTEED_NO_EVICT", False, {"batch_wait_timeout_iters": 4,
                                                       "batch_wait_max_tokens_ratio": 0.9})]
    for seed, tpb, kv_blocks, policy, chunked, *extra in cases:
        opt = TRTLLMOptions(tokens_per_block=tpb, max_num_tokens=256, max_batch_size=16,
                            capacity_scheduler_policy=policy, enable_chunked_context=chunked,
                            **(extra[0] if extra else {}))
        assert_fast_equals_step(TRTLLMEngine, spread_workload(seed, max_in=250), opt, kv_blocks * tpb)
