# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled :class:`servesim.engines.sglang_batch.RunningBatch`.

The same columns in the same numpy arrays (so ``indices()`` and ``columns()`` still hand out
views), with each reduction a C loop instead of a few numpy calls.  Integer arithmetic only,
so the results are the reference's exactly; ``tests/engines/test_sglang_batch.py`` runs both
through the same operations.  Floor division matches Python's for the non-negative values
held here (token counts).
"""

import numpy as np

cimport numpy as cnp
from libc.stdint cimport int64_t

from servesim._arrays cimport int64_data, new_int64

cnp.import_array()

cdef long long NO_LIMIT = 1 << 62  # sglang_batch.NO_LIMIT


cdef class RunningBatch:
    cdef public Py_ssize_t n
    cdef public list reqs
    cdef object _idx, _comp, _gen, _max, _pref
    cdef long long[::1] idx, comp, gen, mx, pref

    def __init__(self, Py_ssize_t capacity=64):
        self.n = 0
        self.reqs = []
        self._alloc(capacity)

    cdef _alloc(self, Py_ssize_t capacity):
        self._idx = np.zeros(capacity, dtype=np.int64)
        self._comp = np.zeros(capacity, dtype=np.int64)
        self._gen = np.zeros(capacity, dtype=np.int64)
        self._max = np.zeros(capacity, dtype=np.int64)
        self._pref = np.zeros(capacity, dtype=np.int64)
        self.idx, self.comp, self.gen = self._idx, self._comp, self._gen
        self.mx, self.pref = self._max, self._pref

    def append(self, sr):
        cdef Py_ssize_t n = self.n
        if n == self.idx.shape[0]:
            old = (self._idx, self._comp, self._gen, self._max, self._pref)
            self._alloc(2 * n)
            for src, dst in zip(old, (self._idx, self._comp, self._gen, self._max, self._pref)):
                dst[:n] = src[:n]
        self.idx[n] = sr.req.index
        self.comp[n] = sr.computed
        self.gen[n] = sr.generated
        self.mx[n] = sr.max_new
        self.pref[n] = sr.prefix
        self.reqs.append(sr)
        self.n = n + 1

    def clear(self):
        self.n = 0
        del self.reqs[:]

    # -- reads ----------------------------------------------------------------------------
    def indices(self):
        return self._idx[:self.n]

    def columns(self):
        cdef Py_ssize_t n = self.n
        return self._comp[:n], self._gen[:n], self._max[:n], self._pref[:n]

    def sync(self, long long page):
        cdef Py_ssize_t i
        for i in range(self.n):
            self._write_back(self.reqs[i], i, page)

    cdef _write_back(self, sr, Py_ssize_t i, long long page):
        cdef long long c = self.comp[i]
        sr.computed = c
        sr.generated = self.gen[i]
        sr.alloc = ((c + page - 1) // page) * page - sr.prefix

    def reserve(self, long long clip):
        cdef long long total = 0, left
        cdef Py_ssize_t i
        for i in range(self.n):
            left = self.mx[i] - self.gen[i]
            total += left if left < clip else clip
        return total

    def outstanding(self):
        cdef long long total = 0, left
        cdef Py_ssize_t i
        for i in range(self.n):
            left = self.mx[i] - self.gen[i]
            if left > 0:
                total += left
        return total

    def left_min(self):
        cdef long long best = NO_LIMIT, left
        cdef Py_ssize_t i
        if self.n == 0:
            return NO_LIMIT
        best = self.mx[0] - self.gen[0]
        for i in range(1, self.n):
            left = self.mx[i] - self.gen[i]
            if left < best:
                best = left
        return best

    def decode_need(self, long long page):
        cdef long long count = 0
        cdef Py_ssize_t i
        if page == 1:
            return self.n
        for i in range(self.n):
            if self.comp[i] % page == 0:
                count += 1
        return page * count

    def contexts(self):
        cdef Py_ssize_t i, n = self.n
        out = new_int64(n)
        cdef int64_t* ctx = int64_data(out)
        for i in range(n):
            ctx[i] = self.comp[i] + 1
        return out

    # -- writes ---------------------------------------------------------------------------
    def advance(self, long long k, long long page):
        cdef long long extra = 0, c
        cdef Py_ssize_t i, n = self.n
        if page == 1:
            extra = n * (k - 1)
            for i in range(n):
                self.comp[i] += k
                self.gen[i] += k
            return extra
        for i in range(n):
            c = self.comp[i]
            extra += (c + (k - 1)) // page - c // page
            self.comp[i] = c + k
            self.gen[i] += k
        return page * extra

    def remove_done(self, long long page):
        cdef Py_ssize_t i, m = 0, n = self.n
        cdef list done = []
        cdef list reqs = self.reqs
        for i in range(n):
            if self.gen[i] >= self.mx[i]:
                self._write_back(reqs[i], i, page)
                done.append(reqs[i])
                continue
            if m != i:
                self.idx[m] = self.idx[i]
                self.comp[m] = self.comp[i]
                self.gen[m] = self.gen[i]
                self.mx[m] = self.mx[i]
                self.pref[m] = self.pref[i]
                reqs[m] = reqs[i]
            m += 1
        if m < n:
            del reqs[m:]
        self.n = m
        return done
