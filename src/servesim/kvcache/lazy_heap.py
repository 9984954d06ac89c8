"""The radix cache's lazy eviction heap: nodes ordered by an integer key pair.

:class:`servesim.kvcache.radix_cache.RadixCache` keeps one heap of its evictable leaves for
the policies whose keys only grow (LRU, LFU, FIFO).  Entries order by ``(k1, k2, uid, n)``:
the policy's key as two integers (LRU ``(last_seq, 0)``, LFU ``(access_count, last_seq)``,
FIFO ``(insert_seq, 0)``), the node's uid, then the push count, so that no two entries ever
compare equal and the pop order does not depend on how the heap is arranged.

:class:`LazyHeap` here is the reference, a ``heapq`` of tuples; ``_lazy_heap.pyx`` compiles
the same class over a C array of entries (a pop there builds no tuple and compares no Python
objects).  :func:`new_lazy_heap` picks one; ``tests/kvcache/test_lazy_heap.py`` runs both
through the same operations.
"""

from __future__ import annotations

import heapq
import itertools

from servesim.compiled import compiled_module


class LazyHeap:
    """A min-heap of nodes keyed by ``(k1, k2, uid)``; :meth:`pop` leaves the popped key in
    ``k1``/``k2``."""

    __slots__ = ("_heap", "_pushes", "k1", "k2")

    def __init__(self) -> None:
        self._heap: list = []
        self._pushes = itertools.count()
        self.k1 = 0
        self.k2 = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, k1: int, k2: int, uid: int, node: object) -> None:
        heapq.heappush(self._heap, (k1, k2, uid, next(self._pushes), node))

    def pop(self) -> object:
        """The node of the smallest entry, which leaves the heap (its key in ``k1``, ``k2``)."""
        self.k1, self.k2, _uid, _n, node = heapq.heappop(self._heap)
        return node

    def clear(self) -> None:
        self._heap.clear()


def new_lazy_heap() -> LazyHeap:
    """The compiled heap where built (``SERVESIM_PURE_PYTHON`` unset), else the reference."""
    return _core.LazyHeap() if _core is not None else LazyHeap()


_core = compiled_module("kvcache._lazy_heap")  # bound at import: servesim/compiled.py's rule
