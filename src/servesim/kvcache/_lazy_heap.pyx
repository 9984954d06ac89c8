# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled :class:`servesim.kvcache.lazy_heap.LazyHeap`: the same entries and order, in the C
heap of ``servesim/_heap.pxd`` (each entry ``(0.0, k1, k2, uid, n)`` holding its node)."""

from libc.stdint cimport int64_t

from servesim._heap cimport Heap, HeapEntry, heap_clear, heap_free, heap_init, heap_pop, heap_push


cdef class LazyHeap:
    """A min-heap of nodes keyed by ``(k1, k2, uid)``; :meth:`pop` leaves the popped key in
    ``k1``/``k2``."""

    cdef Heap h
    cdef int64_t pushes
    cdef public int64_t k1, k2

    def __cinit__(self):
        heap_init(&self.h)
        self.pushes = 0
        self.k1 = self.k2 = 0

    def __dealloc__(self):
        heap_free(&self.h)

    def __len__(self):
        return self.h.size

    cpdef push(self, int64_t k1, int64_t k2, int64_t uid, object node):
        cdef HeapEntry e
        e.time, e.k1, e.k2, e.k3, e.k4 = 0.0, k1, k2, uid, self.pushes
        heap_push(&self.h, e, node)
        self.pushes += 1

    cpdef object pop(self):
        """The node of the smallest entry, which leaves the heap (its key in ``k1``, ``k2``)."""
        cdef HeapEntry top
        node = heap_pop(&self.h, &top)
        self.k1, self.k2 = top.k1, top.k2
        return node

    cpdef clear(self):
        heap_clear(&self.h)
