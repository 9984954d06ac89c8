# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled :class:`servesim.metrics.prefix_seen.SeenPrefixes`: the same bisections and the
same answers, over an open-addressing table of uint64 keys (linear probing, at most half
full; key 0, which marks an empty slot, is kept apart) instead of a set of Python ints.
:meth:`SeenPrefixes.match_sequences` keys each request's ids as it reads them from its tuples
(the reference's :class:`~servesim.metrics.prefix_seen.PrefixKeys`, one request at a time):
no array per request, no concatenation, no gathered powers."""

from cpython.long cimport PyLong_AsUnsignedLongLong
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport calloc, free, malloc

import numpy as np
cimport numpy as cnp

cnp.import_array()


#: The reference's rolling-hash multiplier ``P`` and its inverse ``Q`` modulo 2**64.
cdef uint64_t _P = 0x9E3779B97F4A7C15ULL
cdef uint64_t _Q = pow(0x9E3779B97F4A7C15, -1, 1 << 64)


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

    def match_sequences(self, list prompts, list answers, const uint64_t[::1] offsets,
                        const int64_t[::1] limits):
        """The reference's :meth:`match_sequences`: per request, its keys
        ``P**k * sum_{j<=k} (id[j] + 1) * Q**j * P * Q`` (the reference's powers, ``Q**(j+1) * P``
        and ``P**(k+1) * Q``), modulo 2**64, into a scratch buffer; then the same bisection and
        additions as :meth:`match_chunk`."""
        cdef Py_ssize_t n = len(prompts), i, j, size, np_, longest = 1
        cdef int64_t lo, hi, mid
        cdef uint64_t total, qp, pp, off
        cdef tuple prompt, answer
        if len(answers) != n or offsets.shape[0] != n or limits.shape[0] != n:
            raise ValueError("one prompt, answer, offset and limit per request")
        for i in range(n):
            size = len(<tuple>prompts[i]) + len(<tuple>answers[i])
            if size > longest:
                longest = size
        out = np.zeros(n, dtype=np.int64)
        cdef int64_t[::1] res = out
        cdef uint64_t* keys = <uint64_t*>malloc(longest * sizeof(uint64_t))
        if keys == NULL:
            raise MemoryError()
        try:
            for i in range(n):
                prompt = <tuple>prompts[i]
                answer = <tuple>answers[i]
                np_ = PyTuple_GET_SIZE(prompt)
                size = np_ + PyTuple_GET_SIZE(answer)
                off = offsets[i]
                total = 0
                qp = _Q
                pp = _P
                for j in range(size):
                    if j < np_:
                        total += (PyLong_AsUnsignedLongLong(<object>PyTuple_GET_ITEM(prompt, j)) + off + 1) * (qp * _P)
                    else:
                        total += (PyLong_AsUnsignedLongLong(<object>PyTuple_GET_ITEM(answer, j - np_)) + off + 1) \
                            * (qp * _P)
                    keys[j] = total * (pp * _Q)
                    qp *= _Q
                    pp *= _P
                lo, hi = 0, limits[i]
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if self._has(keys[mid - 1]):
                        lo = mid
                    else:
                        hi = mid - 1
                res[i] = lo
                for j in range(lo, size):
                    self._add(keys[j])
        finally:
            free(keys)
        return out
