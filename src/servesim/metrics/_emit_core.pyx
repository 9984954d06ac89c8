# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled token emission for :class:`servesim.metrics.recorder.RequestRecorder`.

One call records a pass's emission for a batch of requests: first and second token times,
the inter-token gaps of requests that had emitted before (as (value, count) pairs, warm-up
requests apart), the last token time and the emission count.  The Python recorder does
the same with about ten numpy operations, each with a fixed cost of around a microsecond;
a decode pass of a few dozen requests needs a few microseconds here.

The gaps of a pass are reduced exactly as the Python recorder reduces them, so the pairs
appended are the same values in the same order: the first gap and how often it occurs;
then, of the others, one value and its count if they are all equal, or else each distinct
value with its count in ascending order.  ``tests/sim/test_emit_core.py`` checks the two
recorders agree on random emissions.

The pairs wait in C arrays (:class:`Pairs`), not in Python lists: a run appends millions
of them, and a Python float and int per pair, then a list-to-array conversion per chunk,
cost more than the emission itself.  A full buffer goes to the recorder's samples as one
pair of arrays; chunk boundaries do not matter, since the samples concatenate the chunks.
"""

import numpy as np

cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc, qsort
from libc.string cimport memcpy

from servesim._arrays cimport as_float64_vector, as_int64_vector, float64_data, int64_data

cnp.import_array()


cdef int _cmp_double(const void* a, const void* b) noexcept nogil:
    cdef double x = (<const double*>a)[0]
    cdef double y = (<const double*>b)[0]
    return (x > y) - (x < y)


cdef class Pairs:
    """Pending (gap, count) pairs; every ``capacity`` of them go to ``sink.add(values, counts)``
    (a :class:`servesim.metrics.stats.WeightedSamples`) as float64 and int32 arrays."""

    cdef double* v
    cdef int32_t* w
    cdef Py_ssize_t n, cap
    cdef object sink

    def __cinit__(self, object sink, Py_ssize_t capacity):
        self.cap = capacity if capacity > 0 else 1
        self.n = 0
        self.sink = sink
        self.v = <double*>malloc(self.cap * sizeof(double))
        self.w = <int32_t*>malloc(self.cap * sizeof(int32_t))
        if not self.v or not self.w:
            raise MemoryError()

    def __dealloc__(self):
        free(self.v)
        free(self.w)

    cdef inline int push(self, double value, Py_ssize_t count) except -1:
        if self.n == self.cap:
            self.flush()
        self.v[self.n] = value
        self.w[self.n] = <int32_t>count
        self.n += 1
        return 0

    cpdef flush(self):
        """Hand the pending pairs to the sink."""
        cdef Py_ssize_t n = self.n
        if n == 0:
            return
        values = np.empty(n, dtype=np.float64)
        counts = np.empty(n, dtype=np.int32)
        cdef double[::1] vv = values
        cdef int32_t[::1] cc = counts
        memcpy(&vv[0], self.v, n * sizeof(double))
        memcpy(&cc[0], self.w, n * sizeof(int32_t))
        self.n = 0
        self.sink.add(values, counts)


cdef int _add_gaps(double* gaps, Py_ssize_t n, Pairs out) except -1:
    """Append ``gaps[:n]`` as (value, count) pairs, as ``RequestRecorder._add_gaps`` does."""
    if n == 0:
        return 0
    cdef double g0 = gaps[0]
    cdef Py_ssize_t i, k = 0, m = 0, run
    for i in range(n):
        if gaps[i] == g0:
            k += 1
        else:
            gaps[m] = gaps[i]  # the others, in order, compacted to the front
            m += 1
    out.push(g0, k)
    if m == 0:
        return 0
    cdef double g1 = gaps[0]
    cdef bint same = True
    for i in range(1, m):
        if gaps[i] != g1:
            same = False
            break
    if same:
        out.push(g1, m)
        return 0
    qsort(gaps, m, sizeof(double), _cmp_double)
    i = 0
    while i < m:
        run = i + 1
        while run < m and gaps[run] == gaps[i]:
            run += 1
        out.push(gaps[i], run - i)
        i = run
    return 0


cdef class Emitter:
    """A recorder's hot columns and pending gap lists, held as typed views between passes.

    Acquiring six array views costs a few microseconds per call, more than the emission of
    a small batch, so the recorder builds one ``Emitter`` and rebuilds it only when its
    columns grow (:meth:`RequestRecorder.register`), flushing the old one's pairs first.
    Gaps of measured requests go to ``itl``, those of warm-up requests to ``itl_warmup``,
    in chunks of ``chunk`` pairs (and whatever is pending at :meth:`flush`).
    """

    cdef int64_t[::1] em
    cdef double[::1] last
    cdef double[::1] first
    cdef double[::1] second
    cdef const uint8_t[::1] warm
    cdef public bint any_warm
    cdef Pairs cold_pairs, warm_pairs

    def __init__(self, int64_t[::1] em, double[::1] last, double[::1] first, double[::1] second,
                 const uint8_t[::1] warm, bint any_warm, itl, itl_warmup, Py_ssize_t chunk):
        self.em, self.last, self.first, self.second, self.warm = em, last, first, second, warm
        self.any_warm = any_warm
        self.cold_pairs = Pairs(itl, chunk)
        self.warm_pairs = Pairs(itl_warmup, chunk)

    def flush(self):
        """Hand every pending pair to the samples."""
        self.cold_pairs.flush()
        self.warm_pairs.flush()

    def emit(self, idx, double t, double t_second, bint has_second, double t_last, int64_t add_emissions) -> int:
        """Requests ``idx`` emit at ``t``; returns how many of them are warm-up requests.

        A request's first token is at ``t`` (its second at ``t_second`` when ``has_second``:
        a stretch's next pass); a request on its first token before gets its second at ``t``;
        the others add the gap ``t - last``.  Afterwards every request's last token time is
        ``t_last`` and its emission count grows by ``add_emissions``.
        """
        idx = as_int64_vector(idx)
        return self._emit(int64_data(idx), len(idx), t, t_second, has_second, t_last, add_emissions)

    cdef int _emit(self, const int64_t* idx, Py_ssize_t n, double t, double t_second, bint has_second,
                   double t_last, int64_t add_emissions) except -1:
        """:meth:`emit` of the ``n`` request indices at ``idx``."""
        cdef Py_ssize_t i, nc = 0, nw = 0
        cdef Py_ssize_t rows = min(self.em.shape[0], self.last.shape[0], self.first.shape[0],
                                   self.second.shape[0])
        cdef int64_t r, e
        cdef int n_warm = 0
        cdef bint w, any_warm = self.any_warm
        if any_warm and self.warm.shape[0] < rows:
            rows = self.warm.shape[0]
        for i in range(n):  # checked first, so that a bad index changes nothing
            r = idx[i]
            if r < 0 or r >= rows:
                raise IndexError(f"request index {r} outside the recorder's columns")
        cdef double* cold = <double*>malloc((n if n > 0 else 1) * sizeof(double))
        cdef double* hot = <double*>malloc((n if n > 0 else 1) * sizeof(double))
        if not cold or not hot:
            free(cold)
            free(hot)
            raise MemoryError()
        try:
            for i in range(n):
                r = idx[i]
                e = self.em[r]
                w = any_warm and self.warm[r] != 0
                n_warm += w
                if e == 0:
                    self.first[r] = t
                    if has_second:
                        self.second[r] = t_second
                else:
                    if e == 1:
                        self.second[r] = t
                    if w:
                        hot[nw] = t - self.last[r]
                        nw += 1
                    else:
                        cold[nc] = t - self.last[r]
                        nc += 1
                self.last[r] = t_last
                self.em[r] = e + add_emissions
            _add_gaps(hot, nw, self.warm_pairs)
            _add_gaps(cold, nc, self.cold_pairs)
        finally:
            free(cold)
            free(hot)
        return n_warm

    def emit_stretch(self, idx, pass_ends):
        """Requests ``idx`` each emit one token at every time in ``pass_ends`` (two or more).

        :meth:`emit` for the first pass (with the second token at the next pass end), then
        the gaps between consecutive pass ends, one (value, count) pair per pass for the
        cold requests and one for the warm-up requests, as ``RequestRecorder.emit_stretch``
        appends them.
        """
        idx = as_int64_vector(idx)
        pass_ends = as_float64_vector(pass_ends)
        cdef Py_ssize_t k = len(pass_ends), s, n = len(idx)
        if k < 2:
            raise ValueError(f"a stretch has two or more passes, got {k}")
        cdef const double* ends = float64_data(pass_ends)
        cdef int n_warm = self._emit(int64_data(idx), n, ends[0], ends[1], True, ends[k - 1], k)
        cdef Py_ssize_t n_cold = n - n_warm
        cdef double g
        for s in range(1, k):
            g = ends[s] - ends[s - 1]
            if n_cold:
                self.cold_pairs.push(g, n_cold)
            if n_warm:
                self.warm_pairs.push(g, n_warm)
