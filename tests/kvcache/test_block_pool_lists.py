"""The block pool keeps reference counts and hashes in flat lists; ``Block`` objects are views.

Under LRU the pool creates no ``Block`` objects unless one is asked for; whatever path
created it, a block's ``ref`` / ``hash`` read and write the pool's lists.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.kvcache.block_pool import BlockPool

ops_st = st.lists(
    st.tuples(st.sampled_from(["alloc", "cache", "free", "take"]), st.integers(0, 12), st.integers(0, 40)),
    min_size=1, max_size=60,
)


def test_lru_pool_creates_blocks_on_demand():
    pool = BlockPool(50, 4)
    assert pool.blocks._made == {}  # nothing created up front
    got = pool.allocate(3)
    pool.cache_full_blocks(got, [7, 8, 9])
    assert pool.blocks._made == {}  # allocation and caching need no Block objects
    blk = pool.blocks[got[1]]
    assert (blk.idx, blk.ref, blk.hash) == (got[1], 1, 8)
    assert pool.blocks[got[1]] is blk and pool.blocks[-1].idx == 49
    assert [b.idx for b in pool.blocks[2:5]] == [2, 3, 4] and len(pool.blocks) == 50
    with pytest.raises(IndexError):
        pool.blocks[50]
    blk.ref = 2  # a view writes through
    assert pool.refs[got[1]] == 2


@settings(max_examples=100, deadline=None)
@given(ops=ops_st, num_blocks=st.integers(1, 30), policy=st.sampled_from(["lru", "lfu", "fifo"]))
def test_block_views_equal_the_lists(ops, num_blocks, policy):
    pool = BlockPool(num_blocks, 4, policy=policy)
    held: list[list[int]] = []
    for op, a, b in ops:
        if op == "alloc":
            got = pool.allocate(a)
            if got:
                held.append(got)
        elif op == "cache" and held:
            blocks = held[a % len(held)]
            pool.cache_full_blocks(blocks, [1000 + b + i for i in range(len(blocks))])
        elif op == "free" and held:
            pool.free_request(held.pop(a % len(held)))
        elif op == "take":
            hashes = [1000 + b + i for i in range(a)]
            n = pool.find_cached_prefix(hashes)
            if n:
                held.append(pool.take_cached(hashes[:n]))
        pool.check_invariants()
        assert [(blk.ref, blk.hash) for blk in pool.blocks] == list(zip(pool.refs, pool.hashes))
        assert sum(pool.refs) == sum(len(h) for h in held)

