# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled :class:`servesim.metrics.prefix_seen.SeenPrefixes`: the same bisections and the
same answers, over an open-addressing table of uint64 keys (linear probing, at most half
full; key 0, which marks an empty slot, is kept apart) instead of a set of Python ints."""

from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport calloc, free

import numpy as np
cimport numpy as cnp

cnp.import_array()


cdef class SeenPrefixes:
    """The set of prefix keys sent so far."""

    cdef uint64_t* slots
    cdef Py_ssize_t cap, count
    cdef bint has_zero

    def __cinit__(self):
        self.cap = 1 << 16
        self.count = 0
        self.has_zero = False
        self.slots = <uint64_t*>calloc(self.cap, sizeof(uint64_t))
        if self.slots == NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.slots)

    cdef inline Py_ssize_t _slot(self, uint64_t key) nogil:
        """The slot holding ``key``, or the empty one where it would go."""
        cdef Py_ssize_t mask = self.cap - 1
        cdef uint64_t h = (key ^ (key >> 29)) * 0x9E3779B97F4A7C15ULL  # high and low bits both count
        cdef Py_ssize_t i = <Py_ssize_t>(h >> 32) & mask
        while self.slots[i] != 0 and self.slots[i] != key:
            i = (i + 1) & mask
        return i

    cdef bint _has(self, uint64_t key) nogil:
        if key == 0:
            return self.has_zero
        return self.slots[self._slot(key)] == key

    cdef int _add(self, uint64_t key) except -1:
        cdef Py_ssize_t i
        if key == 0:
            self.has_zero = True
            return 0
        i = self._slot(key)
        if self.slots[i] == 0:
            self.slots[i] = key
            self.count += 1
            if 2 * self.count > self.cap:
                self._grow()
        return 0

    cdef int _grow(self) except -1:
        cdef uint64_t* old = self.slots
        cdef Py_ssize_t old_cap = self.cap, j
        self.slots = <uint64_t*>calloc(2 * old_cap, sizeof(uint64_t))
        if self.slots == NULL:
            self.slots = old
            raise MemoryError()
        self.cap = 2 * old_cap
        for j in range(old_cap):
            if old[j] != 0:
                self.slots[self._slot(old[j])] = old[j]
        free(old)
        return 0

    def match_chunk(self, const uint64_t[::1] keys, const int64_t[::1] starts, const int64_t[::1] sizes,
                    const int64_t[::1] limits):
        """For each sequence in order: the largest ``k <= limit`` whose key ``k - 1`` was seen,
        by the reference's bisection; then its keys from ``k`` on are seen too."""
        cdef Py_ssize_t n = starts.shape[0], i, j
        cdef int64_t lo, hi, mid, start
        out = np.zeros(n, dtype=np.int64)
        cdef int64_t[::1] res = out
        for i in range(n):
            start = starts[i]
            lo, hi = 0, limits[i]
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self._has(keys[start + mid - 1]):
                    lo = mid
                else:
                    hi = mid - 1
            res[i] = lo
            for j in range(start + lo, start + sizes[i]):
                self._add(keys[j])
        return out
