"""Property tests: random operation sequences through both caches, invariants after each.

Prompts are drawn from a small alphabet of block ids so they share random prefixes, with
a partial last block of random length (unit size 8 tokens), which exercises splits inside
blocks.  After every operation ``check_invariants()`` must pass and nothing a running
request holds (locked radix path, referenced block) may have been evicted.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.kvcache import BlockPool, NextUseOracle, RadixCache, block_hashes

U = 8
POLICIES = ["lru", "lfu", "fifo", "belady"]


def prompt(seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    n = rng.randint(1, 5)
    ids = [rng.randrange(3) if k < 2 else rng.randrange(12) for k in range(n)]
    return [(b, U) for b in ids[:-1]] + [(ids[-1], rng.randint(1, U))]


ops_strategy = st.lists(
    st.tuples(st.sampled_from(["start", "start", "finish", "chunk", "evict", "match"]), st.integers(0, 10**6)),
    min_size=1,
    max_size=40,
)


def path_tokens(node) -> int:
    n = 0
    while node.parent is not None:
        assert node.parent.children.get(node.block_id) is node, "locked node detached"
        n += node.ntok
        node = node.parent
    return n


@settings(max_examples=40, deadline=None)
@given(
    ops=ops_strategy,
    capacity=st.integers(8, 80),
    page=st.sampled_from([1, 2, 4]),
    policy=st.sampled_from(POLICIES),
)
def test_radix_cache_random_operations(ops, capacity, page, policy):
    oracle = NextUseOracle([(float(t), prompt(seed)) for t, (_, seed) in enumerate(ops)])
    c = RadixCache(capacity, page_size=page, policy=policy, oracle=oracle)
    active: list[dict] = []
    for t, (op, seed) in enumerate(ops):
        c.now = float(t)
        rng = random.Random(seed)
        if op == "start":
            units = prompt(seed)
            total = sum(n for _, n in units)
            m = c.match_prefix(units, total)
            assert m.tokens % page == 0
            c.inc_lock_ref(m.node)
            if c.alloc(total - m.tokens):
                active.append({"units": units, "total": total, "m": m})
            else:
                c.dec_lock_ref(m.node)
        elif op == "finish" and active:
            r = active.pop(rng.randrange(len(active)))
            c.cache_finished(r["units"], r["total"], r["m"].tokens, r["m"].node)
        elif op == "chunk" and active:
            r = active[rng.randrange(len(active))]
            done = rng.randint(r["m"].tokens, r["total"])
            r["m"] = c.cache_unfinished(r["units"], done, r["m"].tokens, r["m"].node)
        elif op == "evict":
            before = c.evictable_size
            freed = c.evict(rng.randint(1, 40))
            assert freed <= before
        elif op == "match":
            c.match_prefix(prompt(seed))
        c.check_invariants()
        for r in active:  # locked prefixes survive everything
            assert path_tokens(r["m"].node) == r["m"].tokens
    for r in active:
        c.cache_finished(r["units"], r["total"], r["m"].tokens, r["m"].node)
    c.check_invariants()
    assert c.pool.private_tokens == 0 and c.protected_size == 0
    c.evict(10**9)
    assert c.total_size == 0 and c.pool.free_tokens == capacity


@settings(max_examples=40, deadline=None)
@given(
    ops=ops_strategy,
    num_blocks=st.integers(2, 24),
    bs=st.sampled_from([2, 4, 8]),
    policy=st.sampled_from(POLICIES),
)
def test_block_pool_random_operations(ops, num_blocks, bs, policy):
    oracle = NextUseOracle([(float(t), prompt(seed)) for t, (_, seed) in enumerate(ops)])
    pool = BlockPool(num_blocks, block_size=bs, policy=policy, oracle=oracle)
    active: list[dict] = []

    def held() -> dict[int, int | None]:
        return {b: pool.blocks[b].hash for r in active for b in r["blocks"]}

    for t, (op, seed) in enumerate(ops):
        pool.now = float(t)
        rng = random.Random(seed)
        before = held()
        if op == "start":
            units = prompt(seed)
            total = sum(n for _, n in units)
            hashes = block_hashes(units, bs, unit_size=U)
            n = pool.find_cached_prefix(hashes)
            blocks = pool.take_cached(hashes[:n])
            new = pool.allocate(-(-total // bs) - n)
            if new is None:
                pool.free_request(blocks)
            else:
                assert not set(new) & set(before), "allocated a block in use"
                blocks += new
                ids = [units[(k * bs) // U][0] for k in range(len(hashes))]
                pool.cache_full_blocks(blocks[n : len(hashes)], hashes[n:], ids[n:])
                active.append({"blocks": blocks})
        elif op == "finish" and active:
            r = active.pop(rng.randrange(len(active)))
            pool.free_request(r["blocks"])
        elif op in ("evict", "chunk"):
            got = pool.allocate(rng.randint(1, num_blocks))
            if got is not None:
                assert not set(got) & set(before), "allocated a block in use"
                pool.free(got)
        elif op == "match":
            pool.find_cached_prefix(block_hashes(prompt(seed), bs, unit_size=U))
        pool.check_invariants()
        # blocks held by running requests kept their refs and cached hashes
        for b, h in held().items():
            assert pool.blocks[b].ref > 0
            if b in before and before[b] is not None:
                assert pool.blocks[b].hash == before[b]
    for r in active:
        pool.free_request(r["blocks"])
    pool.check_invariants()
    assert pool.num_free_blocks == num_blocks
