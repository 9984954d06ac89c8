"""The lazy-deletion free queue behaves as an ordered set with removal from the middle (vLLM's linked list)."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.kvcache.block_pool import BlockPool, FreeQueue

ops_st = st.lists(st.tuples(st.sampled_from(["pop", "take", "free"]), st.integers(0, 10_000)),
                  min_size=1, max_size=200)


@settings(max_examples=200, deadline=None)
@given(ops=ops_st, num_blocks=st.integers(1, 12), slack=st.sampled_from([0, 1, 4096]))
def test_free_queue_equals_an_ordered_set(ops, num_blocks, slack):
    """Random pops from the head, takes from the middle and frees at the tail, against an OrderedDict.

    ``slack`` 0 compacts on almost every take, so stale entries are dropped mid-sequence too."""
    refs = [0] * num_blocks
    q = type("Queue", (FreeQueue,), {"STALE_SLACK": slack})(num_blocks, refs)
    model: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
    for op, x in ops:
        if op == "pop" and model:
            b = q.popleft()
            assert b == model.popitem(last=False)[0]
            refs[b] += 1
        elif op == "take" and model:
            b = list(model)[x % len(model)]  # a prefix hit on a free block
            del model[b]
            refs[b] += 1
            q.remove(b)
            assert len(q.q) <= 2 * len(q) + slack  # a removal compacts when stale entries pile up
        elif op == "free":
            used = [b for b in range(num_blocks) if refs[b] > 0]
            if used:
                b = used[x % len(used)]
                refs[b] -= 1
                if refs[b] == 0:
                    model[b] = None
                    q.append(b)
        assert len(q) == len(model)
        assert list(q) == list(model)
        assert all((b in q) == (b in model) for b in range(num_blocks))


def test_stale_entries_are_skipped_and_the_later_entry_counts():
    refs = [0, 0, 0]
    q = FreeQueue(3, refs)
    refs[0] = 1  # block 0 hit while free: its entry at the head goes stale
    q.remove(0)
    refs[0] = 0
    q.append(0)  # freed again: joins at the tail
    assert list(q) == [1, 2, 0]
    assert [q.popleft(), q.popleft(), q.popleft()] == [1, 2, 0]
    assert len(q) == 0 and not q.q


@pytest.mark.parametrize("policy", ["lru", "lfu"])
def test_pool_recycles_in_queue_order_after_prefix_hits(policy):
    """A free cached block taken by a prefix hit and freed again moves to the tail of the queue."""
    pool = BlockPool(4, 2, policy=policy)
    a = pool.allocate(2)
    pool.cache_full_blocks(a, [11, 12])
    pool.free_request(a)  # tail first: queue 2, 3, a[1], a[0] under LRU
    assert pool.take_cached([11]) == [a[0]]
    pool.free([a[0]])
    pool.check_invariants()
    if policy == "lru":
        assert list(pool._free) == [2, 3, a[1], a[0]]
        assert pool.allocate(4) == [2, 3, a[1], a[0]]
    pool.check_invariants()
