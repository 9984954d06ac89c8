"""vLLM engine model under random workloads: invariants after every pass, exactly one
terminal state per request, and fast-forward equal to pass-by-pass simulation."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from blockkv_harness import assert_fast_equals_step, check_random_workload, limits, spread_workload
from servesim.engines.vllm.scheduler import VLLMEngine
from servesim.engines.vllm.options import VLLMOptions
from servesim.kvcache.policies import NextUseOracle
from servesim.metrics.recorder import RequestRecorder
from servesim.workload.request import Request


def random_engine(rng: random.Random, rec: RequestRecorder, reqs: list[Request]) -> VLLMEngine:
    bs = rng.choice([1, 4, 16])
    budget = rng.randint(8, 200)
    chunked = rng.random() < 0.8
    policy = rng.choice(["lru", "lru", "lfu", "fifo", "belady"])
    opt = VLLMOptions(
        block_size=bs,
        max_num_batched_tokens=budget,
        max_num_seqs=rng.randint(1, 8),
        enable_chunked_prefill=chunked,
        max_model_len=budget if not chunked else rng.randint(64, 300),
        enable_prefix_caching=rng.random() < 0.8,
        long_prefill_token_threshold=rng.choice([0, 0, rng.randint(1, 50)]),
        eviction_policy=policy,
        async_scheduling=rng.random() < 0.3,
    )
    kv = bs * rng.randint(3, 40) + bs
    oracle = NextUseOracle(reqs) if policy == "belady" else None
    return VLLMEngine(0, rec, limits(kv), opt, oracle)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 10))
def test_random_workloads_keep_invariants(seed: int, n: int) -> None:
    check_random_workload(random_engine, seed, n)


def test_fast_forward_equals_step_mode() -> None:
    for seed, bs, kv_blocks, policy in [(1, 16, 60, "lru"), (2, 4, 200, "lfu"), (3, 16, 400, "lru"), (4, 1, 900, "fifo")]:
        for asynchronous in (False, True):
            opt = VLLMOptions(block_size=bs, max_num_batched_tokens=256, max_num_seqs=16, eviction_policy=policy,
                              async_scheduling=asynchronous)
            assert_fast_equals_step(VLLMEngine, spread_workload(seed, max_in=300), opt, kv_blocks * bs)
