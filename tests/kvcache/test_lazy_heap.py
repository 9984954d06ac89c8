"""The compiled lazy eviction heap pops what the ``heapq`` reference pops, for any operations."""

from __future__ import annotations

import gc
import random
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.compiled import compiled_module
from servesim.kvcache.lazy_heap import LazyHeap

core = compiled_module("kvcache._lazy_heap")
needs_core = pytest.mark.skipif(core is None, reason="compiled extensions not built")


class Node:
    """A stand-in for a radix node: only its identity matters to the heap."""

    def __init__(self, uid: int) -> None:
        self.uid = uid


@needs_core
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 400), st.sampled_from([3, 50, 10**6]))
def test_compiled_heap_pops_like_the_reference(seed, n_ops, key_range):
    """Same pops (node and key) after the same pushes, pops and clears; small key ranges make
    equal keys, where the uid and then the push order decide."""
    rng = random.Random(seed)
    ref, fast = LazyHeap(), core.LazyHeap()
    nodes = [Node(i) for i in range(20)]
    for _ in range(n_ops):
        op = rng.random()
        if op < 0.6 or not len(ref):
            node = rng.choice(nodes)
            k1, k2 = rng.randrange(key_range), rng.randrange(key_range)
            ref.push(k1, k2, node.uid, node)
            fast.push(k1, k2, node.uid, node)
        elif op < 0.97:
            assert ref.pop() is fast.pop()
            assert (ref.k1, ref.k2) == (fast.k1, fast.k2)
        else:
            ref.clear()
            fast.clear()
        assert len(ref) == len(fast)
    while len(ref):
        assert ref.pop() is fast.pop() and (ref.k1, ref.k2) == (fast.k1, fast.k2)
    assert len(fast) == 0


@pytest.mark.parametrize("make", [LazyHeap, pytest.param(lambda: core.LazyHeap(), marks=needs_core)])
def test_heap_order_and_references(make):
    """Order by (k1, k2, uid), then push order; the heap holds (and releases) its nodes."""
    heap = make()
    a, b, c = Node(1), Node(2), Node(3)
    refs = sys.getrefcount(b)
    heap.push(5, 0, 2, b)
    heap.push(5, 0, 2, b)  # the same entry twice: both pop
    heap.push(4, 9, 3, c)
    heap.push(5, 0, 1, a)  # same key as b, smaller uid: first
    assert sys.getrefcount(b) == refs + 2
    assert [heap.pop() for _ in range(4)] == [c, a, b, b]
    assert (heap.k1, heap.k2) == (5, 0)
    assert sys.getrefcount(b) == refs
    with pytest.raises(IndexError):
        heap.pop()
    heap.push(1, 1, 1, b)
    heap.clear()
    gc.collect()
    assert len(heap) == 0 and sys.getrefcount(b) == refs
