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
    assert pool.take_cached([11, 12]) == a  # a[1] leaves the middle of the queue
    pool.free([a[0]])
    pool.free([a[1]])
    pool.check_invariants()
    if policy == "lru":
        assert list(pool._free) == [2, 3, a[0], a[1]]
        assert pool.allocate(4) == [2, 3, a[0], a[1]]
    pool.check_invariants()


class _EagerCompaction(FreeQueue):
    """Compacts on every removal: the pool must not notice."""

    __slots__ = ()

    def remove(self, b: int) -> None:
        self.live -= 1
        self.compact()


pool_ops = st.lists(st.tuples(st.sampled_from(["alloc", "cache", "free", "take"]), st.integers(0, 12),
                              st.integers(0, 40)), min_size=1, max_size=80)


@settings(max_examples=150, deadline=None)
@given(ops=pool_ops, num_blocks=st.integers(1, 24))
def test_pool_is_unchanged_by_compaction(ops, num_blocks):
    """A pool that compacts its free queue at every removal behaves exactly as one that (here) never does.

    "take" asks for a prefix of hashes some "cache" registered, so prefix hits on free blocks
    (the removals that leave stale entries) are common."""
    lazy, eager = BlockPool(num_blocks, 4), BlockPool(num_blocks, 4)
    eager._free.__class__ = _EagerCompaction
    held: list[list[int]] = []
    registered: list[list[int]] = []  # hash lists given to cache_full_blocks
    for op, a, b in ops:
        if op == "alloc":
            got = lazy.allocate(a)
            assert eager.allocate(a) == got
            if got:
                held.append(got)
        elif op == "cache" and held:
            blocks = held[a % len(held)]
            hashes = [1000 * b + i for i in range(len(blocks))]
            assert lazy.cache_full_blocks(blocks, hashes) == eager.cache_full_blocks(blocks, hashes)
            registered.append(hashes)
        elif op == "free" and held:
            blocks = held.pop(a % len(held))
            lazy.free_request(blocks)
            eager.free_request(blocks)
        elif op == "take" and registered:
            hashes = registered[b % len(registered)][: a + 1]
            n = lazy.find_cached_prefix(hashes)
            assert eager.find_cached_prefix(hashes) == n
            if n:
                got = lazy.take_cached(hashes[:n])
                assert eager.take_cached(hashes[:n]) == got
                held.append(got)
        assert list(lazy._free) == list(eager._free)
        assert (lazy.refs, lazy.hashes) == (eager.refs, eager.hashes)
        lazy.check_invariants()
        eager.check_invariants()


def test_a_bad_block_id_leaves_the_free_count_true():
    pool = BlockPool(4, 2)
    a = pool.allocate(2)
    with pytest.raises(RuntimeError):
        pool.free([a[0], a[0]])  # the second drop of a[0] is one too many
    assert pool.num_free_blocks == 3
    pool.check_invariants()
