"""The block pool's LRU allocation fast path equals the general path, operation by operation."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.kvcache.block_pool import BlockPool

ops_st = st.lists(
    st.tuples(st.sampled_from(["alloc", "cache", "free", "take"]), st.integers(0, 12), st.integers(0, 40)),
    min_size=1, max_size=60,
)


def state(pool: BlockPool):
    return (list(pool._free), dict(pool._hash_to_block), [(b.ref, b.hash) for b in pool.blocks])


@settings(max_examples=150, deadline=None)
@given(ops=ops_st, num_blocks=st.integers(1, 30))
def test_lru_fast_allocation_matches_general_path(ops, num_blocks):
    fast = BlockPool(num_blocks, 4)
    events: list = []
    slow = BlockPool(num_blocks, 4, on_event=events.append)  # an event sink forces the general path
    held: list[list[int]] = []  # requests' block lists (same in both pools)
    for op, a, b in ops:
        if op == "alloc":
            got_f, got_s = fast.allocate(a), slow.allocate(a)
            assert got_f == got_s
            if got_f:
                held.append(got_f)
        elif op == "cache" and held:
            blocks = held[a % len(held)]
            hashes = [1000 + b + i for i in range(len(blocks))]  # b collides across requests
            assert fast.cache_full_blocks(blocks, hashes) == slow.cache_full_blocks(blocks, hashes)
        elif op == "free" and held:
            blocks = held.pop(a % len(held))
            fast.free_request(blocks)
            slow.free_request(blocks)
        elif op == "take":
            hashes = [1000 + b + i for i in range(a)]
            n = fast.find_cached_prefix(hashes)
            assert n == slow.find_cached_prefix(hashes)
            if n:
                got = fast.take_cached(hashes[:n])
                assert got == slow.take_cached(hashes[:n])
                held.append(got)
        assert state(fast) == state(slow)
        fast.check_invariants()
