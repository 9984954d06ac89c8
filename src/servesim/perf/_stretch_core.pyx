# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled pricing of a decode stretch for :class:`servesim.perf.analytic.AnalyticStepTime`.

``AnalyticStepTime.decode_stretch_times`` prices ``steps`` identical decode passes, each
request one token longer per pass, with a dozen numpy operations (sort, cumulative sum,
search, element-wise arithmetic), each with a fixed cost of about a microsecond.  This does
the same in one loop over the passes, with the same operations in the same order on each
element, so every duration is bit for bit the numpy one (the extension is built with
floating-point contraction off: no fused multiply-add may merge two roundings into one).
``tests/perf/test_stretch_core.py`` compares the two on random batches.
"""

import numpy as np

from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc, qsort


cdef int _cmp_int64(const void* a, const void* b) noexcept nogil:
    cdef int64_t x = (<const int64_t*>a)[0]
    cdef int64_t y = (<const int64_t*>b)[0]
    return (x > y) - (x < y)


cdef inline double _max(double a, double b) noexcept nogil:
    """``numpy.maximum``: the larger, or a NaN if either is one."""
    return a if (a >= b or a != a) else b


def decode_stretch_times(const int64_t[:] ctx, Py_ssize_t steps, double base, int64_t window,
                         double overhead, double c_full, double m_full, double c_cap, double m_cap,
                         double dp):
    """Durations of ``steps`` decode-only passes over contexts ``ctx`` (pass ``s``: ``ctx + s``).

    Pass ``s`` costs ``base`` plus, divided by ``dp``, ``max(c_full * x, m_full * x)`` with
    ``x = Σ(ctx + s) + overhead`` and, if ``window`` > 0, ``max(c_cap * y, m_cap * y)`` with
    ``y = Σ min(ctx + s, window) + overhead``.
    """
    cdef Py_ssize_t n = ctx.shape[0], i, s
    out = np.empty(steps, dtype=np.float64)
    cdef double[::1] o = out
    cdef int64_t total = 0, below_sum, below
    cdef int64_t* srt = NULL
    cdef int64_t* prefix = NULL
    cdef double x, y, t
    for i in range(n):
        total += ctx[i]
    if window:
        srt = <int64_t*>malloc((n + 1) * sizeof(int64_t))
        prefix = <int64_t*>malloc((n + 1) * sizeof(int64_t))
        if not srt or not prefix:
            free(srt)
            free(prefix)
            raise MemoryError()
        for i in range(n):
            srt[i] = ctx[i]
        qsort(srt, n, sizeof(int64_t), _cmp_int64)
        prefix[0] = 0
        for i in range(n):
            prefix[i + 1] = prefix[i] + srt[i]
        below = n  # requests with ctx + s < window; only falls as s grows
        while below > 0 and srt[below - 1] >= window:
            below -= 1
    try:
        for s in range(steps):
            x = <double>(total + n * s)
            t = _max(c_full * (x + overhead), m_full * (x + overhead))
            if window:
                while below > 0 and srt[below - 1] >= window - s:
                    below -= 1
                y = <double>(prefix[below] + below * s + (n - below) * window)
                t = t + _max(c_cap * (y + overhead), m_cap * (y + overhead))
            o[s] = base + t / dp
    finally:
        free(srt)
        free(prefix)
    return out


def decode_stretch_ends(const int64_t[:] ctx, Py_ssize_t steps, double base, int64_t window,
                        double overhead, double c_full, double m_full, double c_cap, double m_cap,
                        double dp, bint add_extra, double extra, double now):
    """The passes' end times, from ``now``: :func:`decode_stretch_times`, plus ``extra`` each
    when ``add_extra`` (a scheduler overhead), summed in order, plus ``now`` — numpy's
    ``d += extra; e = d.cumsum(); e += now``, operation for operation."""
    out = decode_stretch_times(ctx, steps, base, window, overhead, c_full, m_full, c_cap, m_cap, dp)
    cdef double[::1] o = out
    cdef Py_ssize_t s
    cdef double acc = 0.0
    for s in range(steps):
        if add_extra:
            o[s] = o[s] + extra
        acc = o[s] if s == 0 else acc + o[s]
        o[s] = acc + now
    return out
