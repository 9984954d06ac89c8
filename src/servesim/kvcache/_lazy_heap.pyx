# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled :class:`servesim.kvcache.lazy_heap.LazyHeap`: the same entries and order, in the C
heap of ``servesim/_heap.pxd`` (each entry ``(0.0, k1, k2, uid, n)`` holding its node)."""

from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdint cimport int64_t
from libc.stdlib cimport free

from servesim._heap cimport Heap, HeapEntry, heap_clear, heap_pop, heap_push


cdef class LazyHeap:
    """A min-heap of nodes keyed by ``(k1, k2, uid)``; :meth:`pop` leaves the popped key in
    ``k1``/``k2``."""

    cdef Heap h
    cdef int64_t pushes
    cdef public int64_t k1, k2

    def __cinit__(self):
        self.h.a = NULL
        self.h.size = self.h.cap = 0
        self.pushes = 0
        self.k1 = self.k2 = 0

    def __dealloc__(self):
        heap_clear(&self.h)
        free(self.h.a)

    def __len__(self):
        return self.h.size

    cpdef push(self, int64_t k1, int64_t k2, int64_t uid, object node):
        cdef HeapEntry e
        e.time, e.k1, e.k2, e.k3, e.k4 = 0.0, k1, k2, uid, self.pushes
        Py_INCREF(node)
        e.obj = <PyObject*>node
        try:
            heap_push(&self.h, e)
        except MemoryError:
            Py_DECREF(node)
            raise
        self.pushes += 1

    cpdef object pop(self):
        """The node of the smallest entry, which leaves the heap (its key in ``k1``, ``k2``)."""
        if self.h.size == 0:
            raise IndexError("pop from an empty heap")
        cdef HeapEntry top = heap_pop(&self.h)
        self.k1, self.k2 = top.k1, top.k2
        node = <object>top.obj
        Py_DECREF(node)  # the heap's reference; ``node`` holds its own
        return node

    cpdef clear(self):
        heap_clear(&self.h)
