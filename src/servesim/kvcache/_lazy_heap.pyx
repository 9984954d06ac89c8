# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled :class:`servesim.kvcache.lazy_heap.LazyHeap`: the same entries and order, in a C
array of structs holding a reference to each node."""

from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdint cimport int64_t
from libc.stdlib cimport free, realloc


cdef struct Entry:
    int64_t k1
    int64_t k2
    int64_t uid
    int64_t n
    PyObject* node


cdef inline bint _less(Entry* a, Entry* b) noexcept nogil:
    if a.k1 != b.k1:
        return a.k1 < b.k1
    if a.k2 != b.k2:
        return a.k2 < b.k2
    if a.uid != b.uid:
        return a.uid < b.uid
    return a.n < b.n


cdef class LazyHeap:
    """A min-heap of nodes keyed by ``(k1, k2, uid)``; :meth:`pop` leaves the popped key in
    ``k1``/``k2``."""

    cdef Entry* a
    cdef Py_ssize_t size, cap
    cdef int64_t pushes
    cdef public int64_t k1, k2

    def __cinit__(self):
        self.a = NULL
        self.size = self.cap = 0
        self.pushes = 0
        self.k1 = self.k2 = 0

    def __dealloc__(self):
        self._release()
        free(self.a)

    def __len__(self):
        return self.size

    cdef void _release(self) noexcept:
        cdef Py_ssize_t i
        for i in range(self.size):
            Py_DECREF(<object>self.a[i].node)
        self.size = 0

    cpdef push(self, int64_t k1, int64_t k2, int64_t uid, object node):
        cdef Py_ssize_t i, parent
        cdef Entry e
        cdef Entry* grown
        if self.size == self.cap:
            grown = <Entry*>realloc(self.a, (2 * self.cap + 64) * sizeof(Entry))
            if grown is NULL:
                raise MemoryError()
            self.a = grown
            self.cap = 2 * self.cap + 64
        e.k1, e.k2, e.uid, e.n = k1, k2, uid, self.pushes
        self.pushes += 1
        Py_INCREF(node)
        e.node = <PyObject*>node
        i = self.size
        self.size += 1
        while i > 0:  # sift up
            parent = (i - 1) >> 1
            if not _less(&e, &self.a[parent]):
                break
            self.a[i] = self.a[parent]
            i = parent
        self.a[i] = e

    cpdef object pop(self):
        """The node of the smallest entry, which leaves the heap (its key in ``k1``, ``k2``)."""
        if self.size == 0:
            raise IndexError("pop from an empty heap")
        cdef Entry top = self.a[0]
        cdef Entry last
        cdef Py_ssize_t i = 0, child, n
        self.size -= 1
        n = self.size
        if n:
            last = self.a[n]
            while True:  # sift the last entry down from the root
                child = 2 * i + 1
                if child >= n:
                    break
                if child + 1 < n and _less(&self.a[child + 1], &self.a[child]):
                    child += 1
                if not _less(&self.a[child], &last):
                    break
                self.a[i] = self.a[child]
                i = child
            self.a[i] = last
        self.k1, self.k2 = top.k1, top.k2
        node = <object>top.node
        Py_DECREF(node)  # the heap's reference; ``node`` holds its own
        return node

    cpdef clear(self):
        self._release()
