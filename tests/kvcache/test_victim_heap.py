"""The block pool's lazy victim heap picks exactly the blocks a full scan by policy key would.

Requests arrive (the oracle activates their blocks), are served (prefix hit, allocation,
caching), hold their blocks a while, then release them and end (the oracle deactivates):
every way a Belady key changes while a block waits in the free set — time passing its
next use, a request using it arriving, a request using it ending — occurs.  Before every
allocation the test ranks all free cached blocks itself and checks the pool recycles the
same ones.  Generated-token blocks (ids from ``output_block_id``) are included.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.kvcache import BlockPool, NextUseOracle, block_hashes
from servesim.kvcache.block_pool import _VictimHeap
from servesim.workload.request import Request, output_block_id

BS = 4


def _requests(rng: random.Random, n: int, alphabet: int) -> list[Request]:
    reqs, t = [], 0.0
    for i in range(n):
        t += rng.choice([0.0, 0.5, 1.0, 2.0])
        ids = tuple(rng.randrange(alphabet) for _ in range(rng.randint(1, 4)))
        reqs.append(Request(i, str(i), t, BS * len(ids), 2, ids, block_size=BS))
    return reqs


def _expected_victims(pool: BlockPool, n: int) -> set[int]:
    free_uncached = len(pool._free)
    if n <= free_uncached:
        return set()
    key = pool.policy.key
    ranked = sorted(pool._free_cached, key=lambda b: (key(pool.blocks[b], pool.now), b))
    return set(ranked[: n - free_uncached])


def run(policy: str, seed: int, capacity: int, alphabet: int) -> int:
    rng = random.Random(seed)
    reqs = _requests(rng, 40, alphabet)
    oracle = NextUseOracle(reqs)
    pool = BlockPool(capacity, block_size=BS, policy=policy, oracle=oracle)
    holding: list[tuple[float, Request, list[int]]] = []  # (release time, request, blocks)
    checked = 0
    for req in reqs:
        pool.now = req.arrival
        for rel in [h for h in holding if h[0] <= req.arrival]:
            holding.remove(rel)
            pool.free_request(rel[2])
            oracle.deactivate(rel[1])
        oracle.activate(req)
        units = [(b, BS) for b in req.hash_ids]
        hashes = block_hashes(units, BS, unit_size=BS)
        hit = pool.find_cached_prefix(hashes)
        need = len(hashes) - hit + 1  # plus one block for generated tokens
        if need > pool.num_free_blocks - hit:  # would not fit: the request is turned away
            oracle.deactivate(req)
            continue
        blocks = pool.take_cached(hashes[:hit])
        expected = _expected_victims(pool, need)
        free_cached_before = set(pool._free_cached)
        new = pool.allocate(need)
        assert new is not None
        assert {b for b in new if b in free_cached_before} == expected
        checked += len(expected)
        blocks += new
        gen_id = output_block_id(req.index, 0)
        pool.cache_full_blocks(blocks, hashes + [hash((gen_id, seed))],
                               content_ids=list(req.hash_ids) + [gen_id])
        pool.check_invariants()
        holding.append((req.arrival + rng.choice([0.0, 0.5, 1.5, 3.0]), req, blocks))
    return checked


@settings(max_examples=80, deadline=None)
@given(
    policy=st.sampled_from(["lfu", "fifo", "belady"]),
    seed=st.integers(0, 10_000),
    capacity=st.integers(6, 16),
    alphabet=st.integers(3, 12),
)
def test_victims_match_a_full_scan(policy, seed, capacity, alphabet):
    run(policy, seed, capacity, alphabet)


@pytest.mark.parametrize("policy", ["lfu", "fifo", "belady"])
def test_victims_match_with_the_heaps_compacted_at_every_eviction(policy, monkeypatch):
    monkeypatch.setattr(_VictimHeap, "STALE_SLACK", -10**9)
    for seed in range(20):
        run(policy, seed, 8, 6)


def test_the_check_exercises_evictions():
    assert sum(run("belady", s, 8, 8) for s in range(10)) > 50
