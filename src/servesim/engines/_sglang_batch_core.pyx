# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled :class:`servesim.engines.sglang_batch.RunningBatch`.

The same columns in the same numpy arrays (so ``indices()`` and ``columns()`` still hand out
views), with each reduction a C loop instead of a few numpy calls.  Integer arithmetic only,
so the results are the reference's exactly; ``tests/engines/test_sglang_batch.py`` runs both
through the same operations.  Floor division matches Python's for the non-negative values
held here (token counts).
"""

import numpy as np

cdef long long NO_LIMIT = 1 << 62  # sglang_batch.NO_LIMIT


cdef class RunningBatch:
    cdef public Py_ssize_t n
    cdef object _idx, _comp, _gen, _max, _pref
    cdef long long[::1] idx, comp, gen, mx, pref

    def __init__(self, Py_ssize_t capacity=64):
        self.n = 0
        self._alloc(capacity)

    cdef _alloc(self, Py_ssize_t capacity):
        self._idx = np.zeros(capacity, dtype=np.int64)
        self._comp = np.zeros(capacity, dtype=np.int64)
        self._gen = np.zeros(capacity, dtype=np.int64)
        self._max = np.zeros(capacity, dtype=np.int64)
        self._pref = np.zeros(capacity, dtype=np.int64)
        self.idx, self.comp, self.gen = self._idx, self._comp, self._gen
        self.mx, self.pref = self._max, self._pref

    def append(self, long long index, long long computed, long long generated, long long max_new,
               long long prefix):
        cdef Py_ssize_t n = self.n
        if n == self.idx.shape[0]:
            old = (self._idx, self._comp, self._gen, self._max, self._pref)
            self._alloc(2 * n)
            for src, dst in zip(old, (self._idx, self._comp, self._gen, self._max, self._pref)):
                dst[:n] = src[:n]
        self.idx[n] = index
        self.comp[n] = computed
        self.gen[n] = generated
        self.mx[n] = max_new
        self.pref[n] = prefix
        self.n = n + 1

    def clear(self):
        self.n = 0

    # -- reads ----------------------------------------------------------------------------
    def indices(self):
        return self._idx[:self.n]

    def columns(self):
        cdef Py_ssize_t n = self.n
        return self._comp[:n], self._gen[:n], self._max[:n], self._pref[:n]

    def progress(self, Py_ssize_t i):
        return self.comp[i], self.gen[i]

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
        out = np.empty(n, dtype=np.int64)
        cdef long long[::1] ctx = out
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

    def remove_done(self):
        cdef Py_ssize_t i, m = 0, n = self.n
        cdef list out = []
        for i in range(n):
            if self.gen[i] >= self.mx[i]:
                out.append((i, self.comp[i], self.gen[i]))
                continue
            if m != i:
                self.idx[m] = self.idx[i]
                self.comp[m] = self.comp[i]
                self.gen[m] = self.gen[i]
                self.mx[m] = self.mx[i]
                self.pref[m] = self.pref[i]
            m += 1
        self.n = m
        return out
