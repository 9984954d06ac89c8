"""vLLM engine model under random workloads: invariants after every pass, exactly one
terminal state per request, and fast-forward equal to pass-by-pass simulation."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engines.base import EngineLimits
from servesim.engines.vllm.scheduler import VLLMEngine
from servesim.engines.vllm.options import VLLMOptions
from servesim.kvcache.policies import NextUseOracle
from servesim.metrics.recorder import RequestRecorder
from servesim.workload.request import Request
from simharness import drive_block_pool_engine, random_block_workload, simulate_one_worker


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
    )
    kv = bs * rng.randint(3, 40) + bs
    oracle = NextUseOracle(reqs) if policy == "belady" else None
    return VLLMEngine(0, rec, EngineLimits(kv_capacity_tokens=kv, context_length=4096), opt, oracle)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 10))
def test_random_workloads_keep_invariants(seed: int, n: int) -> None:
    rng = random.Random(seed)
    reqs = random_block_workload(rng, n)
    rec = RequestRecorder()
    eng = random_engine(rng, rec, reqs)
    drive_block_pool_engine(eng, rec, reqs, rng)


def simulate(reqs, opt: VLLMOptions, kv: int, fast: bool) -> RequestRecorder:
    return simulate_one_worker(VLLMEngine, reqs, opt, kv, fast)


def test_fast_forward_equals_step_mode() -> None:
    for seed, bs, kv_blocks, policy in [(1, 16, 60, "lru"), (2, 4, 200, "lfu"), (3, 16, 400, "lru"), (4, 1, 900, "fifo")]:
        rng = random.Random(seed)
        reqs = random_block_workload(rng, 60, max_in=300, max_out=120)
        # Spread arrivals so decode stretches form between them.
        for j, r in enumerate(reqs):
            r.arrival = 0.3 * j + r.arrival
        opt = VLLMOptions(block_size=bs, max_num_batched_tokens=256, max_num_seqs=16, eviction_policy=policy)
        a = simulate(reqs, opt, kv_blocks * bs, fast=False)
        b = simulate(reqs, opt, kv_blocks * bs, fast=True)
        for name in ("first_token", "second_token", "last_token", "finish"):
            np.testing.assert_allclose(a.column(name), b.column(name), rtol=1e-9, err_msg=name)
        for name in ("generated", "retractions", "cached_tokens", "status"):
            assert a.column(name).tolist() == b.column(name).tolist(), name
