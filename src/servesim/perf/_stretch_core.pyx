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

cimport numpy as cnp
from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc, qsort

from servesim._arrays cimport as_int64_vector, float64_data, int64_data, new_float64

cnp.import_array()


cdef int _cmp_int64(const void* a, const void* b) noexcept nogil:
    cdef int64_t x = (<const int64_t*>a)[0]
    cdef int64_t y = (<const int64_t*>b)[0]
    return (x > y) - (x < y)


cdef inline double _max(double a, double b) noexcept nogil:
    """``numpy.maximum``: the larger, or a NaN if either is one."""
    return a if (a >= b or a != a) else b


cdef inline double _ramped(double mem, double ramp) noexcept nogil:
    """A KV stream's time with its kernels' ramp and tail (``AnalyticStepTime._decode_attn``)."""
    return mem + ramp * mem / (mem + ramp) if ramp else mem


cdef int _stretch_times(const int64_t* ctx, Py_ssize_t n, Py_ssize_t steps, double base, int64_t window,
                        double overhead, double c_full, double m_full, double c_cap, double m_cap,
                        double dp, double r_full, double r_cap, double* o) except -1:
    """Write the ``steps`` durations of :func:`decode_stretch_times` over the ``n`` contexts
    ``ctx`` to ``o``."""
    cdef Py_ssize_t i, s
    cdef int64_t total = 0, below = 0
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
    for s in range(steps):
        x = <double>(total + n * s)
        t = _max(c_full * (x + overhead), _ramped(m_full * (x + overhead), r_full))
        if window:
            while below > 0 and srt[below - 1] >= window - s:
                below -= 1
            y = <double>(prefix[below] + below * s + (n - below) * window)
            t = t + _max(c_cap * (y + overhead), _ramped(m_cap * (y + overhead), r_cap))
        o[s] = base + t / dp
    free(srt)
    free(prefix)
    return 0


cdef inline double _with_host(double d, double extra, bint overlapped) noexcept nogil:
    """A pass's duration with the scheduler's CPU time ``extra``: added, or, ``overlapped``
    (prepared while the GPU runs the pass before), the longer of the two (numpy's ``maximum``)."""
    if overlapped:
        return d if d >= extra else extra
    return d + extra


cdef inline void _sum_ends(double* o, Py_ssize_t steps, bint add_extra, double extra, double now,
                           bint overlapped) noexcept:
    """Durations to end times: ``d += extra`` (``d = max(d, extra)`` when ``overlapped``);
    ``e = d.cumsum(); e += now``, operation for operation."""
    cdef Py_ssize_t s
    cdef double acc = 0.0
    for s in range(steps):
        if add_extra:
            o[s] = _with_host(o[s], extra, overlapped)
        acc = o[s] if s == 0 else acc + o[s]
        o[s] = acc + now


cdef inline void _sum_ends_from(double* o, Py_ssize_t steps, bint add_extra, double extra, double pass_s,
                                double per_req, double now, const unsigned char* starts,
                                bint overlapped) noexcept:
    """:func:`_sum_ends` of consecutive stretches, one after another: pass ``s`` with
    ``starts[s]`` set (``s`` > 0) starts a stretch, summed afresh from the end of the pass
    before it, as the worker prices each stretch from its own start.  A stretch of one pass is
    priced as the worker prices a lone pass: ``now + pass_time``, whose scheduler overhead is
    added as ``(t + pass_s) + per_request_s * n`` (``per_req``), not ``t + extra`` (overlapped,
    both are ``max(t, extra)``)."""
    cdef Py_ssize_t s
    cdef double acc = 0.0, base = now
    cdef bint first, alone
    for s in range(steps):
        first = s == 0 or starts[s] != 0
        alone = first and (s + 1 == steps or starts[s + 1] != 0)
        if add_extra:
            if alone and not overlapped:
                o[s] = (o[s] + pass_s) + per_req
            else:
                o[s] = _with_host(o[s], extra, overlapped)
        if first:
            if s:
                base = o[s - 1]
            acc = o[s]
        else:
            acc = acc + o[s]
        o[s] = acc + base


def decode_stretch_times(const int64_t[::1] ctx, Py_ssize_t steps, double base, int64_t window,
                         double overhead, double c_full, double m_full, double c_cap, double m_cap,
                         double dp, double r_full, double r_cap):
    """Durations of ``steps`` decode-only passes over contexts ``ctx`` (pass ``s``: ``ctx + s``).

    Pass ``s`` costs ``base`` plus, divided by ``dp``, ``max(c_full * x, ramped(m_full * x))``
    (``ramped(M) = M + r·M/(M + r)`` with ``r`` = ``r_full``, the KV stream's ramp and tail) with
    ``x = Σ(ctx + s) + overhead`` and, if ``window`` > 0, ``max(c_cap * y, ramped(m_cap * y))`` with
    ``y = Σ min(ctx + s, window) + overhead``.
    """
    out = np.empty(steps, dtype=np.float64)
    cdef double[::1] o = out
    if steps > 0:
        _stretch_times(&ctx[0] if ctx.shape[0] else NULL, ctx.shape[0], steps, base, window, overhead, c_full,
                       m_full, c_cap, m_cap, dp, r_full, r_cap, &o[0])
    return out


def decode_stretch_ends(const int64_t[::1] ctx, Py_ssize_t steps, double base, int64_t window,
                        double overhead, double c_full, double m_full, double c_cap, double m_cap,
                        double dp, double r_full, double r_cap, bint add_extra, double extra, double now,
                        bint overlapped=False):
    """The passes' end times, from ``now``: :func:`decode_stretch_times`, plus ``extra`` each
    when ``add_extra`` (a scheduler overhead; at least ``extra`` each when ``overlapped``),
    summed in order, plus ``now`` — numpy's ``d += extra; e = d.cumsum(); e += now``,
    operation for operation."""
    out = np.empty(steps, dtype=np.float64)
    cdef double[::1] o = out
    if steps > 0:
        _stretch_times(&ctx[0] if ctx.shape[0] else NULL, ctx.shape[0], steps, base, window, overhead, c_full,
                       m_full, c_cap, m_cap, dp, r_full, r_cap, &o[0])
        _sum_ends(&o[0], steps, add_extra, extra, now, overlapped)
    return out


def decode_ctx_sums(ctx, cap) -> tuple:
    """``(float(ctx.sum()), float(np.minimum(ctx, cap).sum()))`` of a pass's decode contexts,
    the second 0.0 when ``cap`` is 0 or None, in one loop: the integer sums are exact either
    way, so the floats are the numpy ones.  (Two numpy reductions cost about 7k instructions
    per priced pass.)"""
    ctx = as_int64_vector(ctx)
    cdef const int64_t* c = int64_data(ctx)
    cdef Py_ssize_t j, n = cnp.PyArray_DIM(<cnp.ndarray>ctx, 0)
    cdef int64_t w = cap if cap else 0
    cdef int64_t full = 0, capped = 0
    for j in range(n):
        full += c[j]
        capped += c[j] if c[j] < w else w
    return <double>full, (<double>capped if w else 0.0)


cdef class StretchPricer:
    """:func:`decode_stretch_ends` for one analytic model (and the scheduler overhead wrapped
    around it), its constants read once.

    A worker prices every decode stretch through the same model; going through the model's
    Python methods each time (the wrapper, the model, its memo of the token-count part, the
    argument tuple) cost several times the kernel itself.  The per-batch-size terms come from
    the model's own Python arithmetic once per batch size, so the results are those of
    ``AnalyticStepTime.decode_stretch_ends`` bit for bit.
    """

    cdef object model
    cdef object pass_s
    cdef object per_request_s
    cdef bint add_extra
    cdef bint overlapped
    cdef int64_t window
    cdef double c_full, m_full, c_cap, m_cap, dp, r_full, r_cap
    #: batch size -> (base, overhead, extra): the terms that depend on it alone
    cdef dict _terms

    def __init__(self, model, pass_s=None, per_request_s=None, overlapped=False):
        self.model = model
        self.add_extra = pass_s is not None
        self.overlapped = bool(overlapped)
        self.pass_s = pass_s
        self.per_request_s = per_request_s
        self.window = int(model._cap or 0)
        self.c_full, self.m_full = model._dec_full
        self.c_cap, self.m_cap = model._dec_cap if model._cap else (0.0, 0.0)
        self.dp = float(model._dp)
        self.r_full, self.r_cap = model.stretch_ramps()
        self._terms = {}

    cdef tuple _terms_for(self, Py_ssize_t n):
        terms = self._terms.get(n)
        if terms is None:  # the same Python expressions as the model's and the wrapper's
            m = self.model
            extra = self.pass_s + self.per_request_s * n if self.add_extra else 0.0
            terms = (float(m._token_part(n, 0, n, 1, True)), float(m._dec_oh * n), float(extra),
                     float(self.pass_s) if self.add_extra else 0.0,
                     float(self.per_request_s * n) if self.add_extra else 0.0)
            self._terms[n] = terms
        return <tuple>terms

    def __call__(self, decode_ctx, Py_ssize_t steps, double now):
        """End times of ``steps`` decode passes over ``decode_ctx`` starting at ``now``."""
        decode_ctx = as_int64_vector(decode_ctx)
        cdef Py_ssize_t n = len(decode_ctx)
        cdef tuple terms = self._terms_for(n)
        out = new_float64(steps)
        cdef double* o = float64_data(out)
        if steps > 0:
            _stretch_times(int64_data(decode_ctx), n, steps, <double>terms[0], self.window, <double>terms[1],
                           self.c_full, self.m_full, self.c_cap, self.m_cap, self.dp, self.r_full,
                           self.r_cap, o)
            _sum_ends(o, steps, self.add_extra, <double>terms[2], now, self.overlapped)
        return out

    def stretches(self, decode_ctx, Py_ssize_t steps, double now, const unsigned char[::1] starts):
        """End times of ``steps`` decode passes over ``decode_ctx`` from ``now`` as consecutive
        stretches, a new one at each pass ``s`` > 0 with ``starts[s]`` set: each pass end equals,
        bit for bit, the one of ``self(decode_ctx + s0, steps_i, end of pass s0 - 1)`` for its
        stretch (``s0`` its first pass: the contexts' integer sums are the same, so are the
        durations)."""
        decode_ctx = as_int64_vector(decode_ctx)
        cdef Py_ssize_t n = len(decode_ctx)
        cdef tuple terms = self._terms_for(n)
        if starts.shape[0] < steps:
            raise ValueError(f"{starts.shape[0]} stretch flags for {steps} passes")
        out = new_float64(steps)
        cdef double* o = float64_data(out)
        if steps > 0:
            _stretch_times(int64_data(decode_ctx), n, steps, <double>terms[0], self.window, <double>terms[1],
                           self.c_full, self.m_full, self.c_cap, self.m_cap, self.dp, self.r_full,
                           self.r_cap, o)
            _sum_ends_from(o, steps, self.add_extra, <double>terms[2], <double>terms[3], <double>terms[4], now,
                           &starts[0], self.overlapped)
        return out
