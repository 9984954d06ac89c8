# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled arithmetic of the block-pool engines' decode passes.

The vLLM model keeps its leading plain decodes as a ``(3, n)`` int64 array (computed tokens,
remaining output, recorder row; ``engines/vllm/fast_path.py:_DecodePrefix``) and the block-pool engines
bound a stretch by the free blocks (``engines/blocks.py:stretch_within_free_blocks``).  Each
is a handful of numpy calls on tens of requests per pass; these are the same integer
arithmetic in C loops (identical results: token counts are non-negative, so C's division
equals numpy's floor division).  ``tests/engines/test_decode_core.py`` compares each with
its numpy version.
"""

import numpy as np

cimport numpy as cnp
from libc.stdint cimport int64_t

from servesim._arrays cimport as_int64_matrix, as_int64_vector, int64_data, new_int64, new_int64_matrix

cnp.import_array()

cdef long long NO_LIMIT = 1 << 62  # vllm/fast_path.py:_DecodePrefix's left_min of an empty prefix


def stretch_within_free_blocks(computed, long long block_size, long long free_blocks, long long limit):
    """See ``engines/blocks.py:stretch_within_free_blocks``."""
    cdef long long lo, hi, mid
    if limit <= 1:
        return 1
    computed = as_int64_vector(computed)  # read in place (a typed memoryview cost more than the loop)
    cdef const int64_t* c = int64_data(computed)
    cdef Py_ssize_t n = len(computed)
    if _blocks_opened(c, n, block_size, limit) <= free_blocks:
        return limit
    lo, hi = 1, limit - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _blocks_opened(c, n, block_size, mid) <= free_blocks:
            lo = mid
        else:
            hi = mid - 1
    return lo


def passes_to_block_event(computed, long long block_size, bint caching):
    """See ``engines/blockkv/arithmetic.py:passes_to_block_event``: one C loop where numpy took
    about eight calls on a few tens of requests, at each pass of a decode stretch that a
    blocked waiting request bounds (agentic workloads: most passes)."""
    computed = as_int64_vector(computed)
    cdef const int64_t* c = int64_data(computed)
    cdef Py_ssize_t j, n = len(computed)
    cdef long long best, s, bs = block_size
    if n == 0:
        raise ValueError("passes_to_block_event: no requests")
    best = bs + 1
    for j in range(n):
        if bs <= 0 or c[j] < 0:  # C's % differs from numpy's there: the reference decides
            from servesim.engines.blockkv.arithmetic import passes_to_block_event as reference
            return reference(computed, block_size, caching)
        # For c >= 0, (-(c + 1)) % bs + 1 == bs - c % bs, and (-(c + 2)) % bs + 1 == bs - (c + 1) % bs.
        s = bs - c[j] % bs
        if s < best:
            best = s
        if caching:
            s = bs - (c[j] + 1) % bs
            if s < best:
                best = s
    return best


cdef long long _blocks_opened(const int64_t* computed, Py_ssize_t n, long long bs, long long k) noexcept:
    cdef long long total = 0, c
    cdef Py_ssize_t j
    for j in range(n):
        c = computed[j]
        total += (c + k - 1) // bs - c // bs
    return total


def left_min(rows):
    """``rows[1].min()``, or the empty prefix's limit."""
    rows = as_int64_matrix(rows)
    cdef Py_ssize_t j, n = cnp.PyArray_DIM(<cnp.ndarray>rows, 1)
    cdef const int64_t* left = int64_data(rows) + n
    cdef long long best
    if n == 0:
        return NO_LIMIT
    best = left[0]
    for j in range(1, n):
        if left[j] < best:
            best = left[j]
    return best


def advance_rows(rows, long long k, long long left_min_, list reqs):
    """The prefix's rows after ``k`` decode passes, less the requests that finished.

    Returns ``(rows, left_min, kept)``: ``kept`` the requests of ``reqs`` (one per column)
    that remain, ``reqs`` itself when all do (``left_min_ > k``).  (The rows are a ``(3, n)``
    int64 array.)
    """
    rows = as_int64_matrix(rows)
    cdef Py_ssize_t j, m = 0, n = cnp.PyArray_DIM(<cnp.ndarray>rows, 1)
    cdef const int64_t* r = int64_data(rows)
    cdef long long best = NO_LIMIT, left
    cdef int64_t* o
    if len(reqs) != n:
        raise ValueError(f"{len(reqs)} requests for {n} columns")
    if left_min_ > k:
        out = new_int64_matrix(3, n)
        o = int64_data(out)
        for j in range(n):
            o[j] = r[j] + k
            o[n + j] = r[n + j] - k
            o[2 * n + j] = r[2 * n + j]
        return out, left_min_ - k, reqs
    for j in range(n):
        if r[n + j] - k > 0:
            m += 1
    out = new_int64_matrix(3, m)
    o = int64_data(out)
    cdef list kept = []
    cdef Py_ssize_t i = 0
    for j in range(n):
        left = r[n + j] - k
        if left <= 0:
            continue
        o[i] = r[j] + k
        o[m + i] = left
        o[2 * m + i] = r[2 * n + j]
        if left < best:
            best = left
        kept.append(reqs[j])
        i += 1
    return out, best, kept


def decode_due(computed, long long bs, bint caching):
    """A pass of the prefix: its contexts and the requests with a block event.

    Returns ``(ctx, due, due_computed, opens)``: ``ctx = computed + 1``; ``due`` the positions
    whose pass opens a block (``ctx % bs == 1 % bs``) or, with prefix caching, fills one
    (``ctx % bs == 0``), in order; ``due_computed`` their computed tokens; ``opens`` how many
    open a block.
    """
    computed = as_int64_vector(computed)
    cdef Py_ssize_t j, n = len(computed)
    cdef const int64_t* c = int64_data(computed)
    cdef long long r, one = 1 % bs
    cdef long long opens = 0
    ctx = new_int64(n)
    cdef int64_t* cx = int64_data(ctx)
    cdef list due = [], due_c = []
    for j in range(n):
        cx[j] = c[j] + 1
        r = cx[j] % bs
        if r == one:
            opens += 1
        if (r <= 1) if caching else (r == one):
            due.append(j)
            due_c.append(c[j])
    return ctx, due, due_c, opens


def extend_rows(rows, list computed, list left, list idx):
    """See ``engines/blocks.py:extend_rows``."""
    rows = as_int64_matrix(rows)
    if cnp.PyArray_DIM(<cnp.ndarray>rows, 0) != 3:
        raise ValueError("decode prefix rows have 3 rows")
    cdef Py_ssize_t r, j, m = cnp.PyArray_DIM(<cnp.ndarray>rows, 1), n = len(computed)
    if len(left) != n or len(idx) != n:
        raise ValueError(f"columns of {n}, {len(left)} and {len(idx)} requests")
    cdef const int64_t* a = int64_data(rows)
    out = new_int64_matrix(3, m + n)
    cdef int64_t* o = int64_data(out)
    for r in range(3):
        for j in range(m):
            o[r * (m + n) + j] = a[r * m + j]
    for j in range(n):
        o[m + j] = computed[j]
        o[(m + n) + m + j] = left[j]
        o[2 * (m + n) + m + j] = idx[j]
    return out


def int64_array(list values):
    """See ``engines/blocks.py:int64_array``."""
    cdef Py_ssize_t j, n = len(values)
    out = new_int64(n)
    cdef int64_t* o = int64_data(out)
    for j in range(n):
        o[j] = values[j]
    return out


def minus_one(values):
    """See ``engines/blockkv/arithmetic.py:minus_one``."""
    values = as_int64_vector(values)
    cdef Py_ssize_t j, n = len(values)
    cdef const int64_t* a = int64_data(values)
    out = new_int64(n)
    cdef int64_t* o = int64_data(out)
    for j in range(n):
        o[j] = a[j] - 1
    return out


def index_with(first, list more):
    """See ``engines/blocks.py:index_with``."""
    cdef Py_ssize_t j, m = 0, n = len(more)
    cdef const int64_t* a = NULL
    if first is not None:
        first = as_int64_vector(first)
        m = len(first)
        a = int64_data(first)
    out = new_int64(m + n)
    cdef int64_t* o = int64_data(out)
    for j in range(m):
        o[j] = a[j]
    for j in range(n):
        o[m + j] = more[j]
    return out


def batch_arrays(pre_rows, pre_ctx, list idx, list ctx, list lefts, Py_ssize_t lead, bint want_rows):
    """See ``engines/blocks.py:batch_arrays``."""
    cdef Py_ssize_t j, m = 0, n_idx, n_dec
    cdef const int64_t* pr = NULL
    cdef const int64_t* pc = NULL
    if pre_rows is not None:
        pre_rows = as_int64_matrix(pre_rows)
        pre_ctx = as_int64_vector(pre_ctx)
        m = cnp.PyArray_DIM(<cnp.ndarray>pre_rows, 1)
        if cnp.PyArray_DIM(<cnp.ndarray>pre_rows, 0) != 3 or len(pre_ctx) != m:
            raise ValueError("the known decodes' rows and contexts disagree")
        pr = int64_data(pre_rows)
        pc = int64_data(pre_ctx)
    if len(lefts) != len(ctx):
        raise ValueError(f"{len(ctx)} decode contexts and {len(lefts)} remaining outputs")
    n_idx = m + len(idx)
    n_dec = m + len(ctx)
    if lead > n_dec or (want_rows and lead > n_idx):
        raise ValueError(f"{lead} leading decodes of {n_dec}")
    all_idx = new_int64(n_idx)
    dctx = new_int64(n_dec)
    cdef int64_t* oi = int64_data(all_idx)
    cdef int64_t* oc = int64_data(dctx)
    for j in range(m):
        oi[j] = pr[2 * m + j]
        oc[j] = pc[j]
    for j in range(len(idx)):
        oi[m + j] = idx[j]
    for j in range(len(ctx)):
        oc[m + j] = ctx[j]
    if not want_rows:
        return all_idx, dctx, None
    rows = new_int64_matrix(3, lead)
    cdef int64_t* o = int64_data(rows)
    for j in range(lead):
        o[j] = oc[j] - 1
        o[lead + j] = pr[m + j] if j < m else <int64_t>lefts[j - m]
        o[2 * lead + j] = oi[j]
    return all_idx, dctx, rows


def finishing(rows, long long k):
    """See ``engines/blocks.py:finishing``."""
    rows = as_int64_matrix(rows)
    cdef Py_ssize_t j, n = cnp.PyArray_DIM(<cnp.ndarray>rows, 1)
    cdef const int64_t* left = int64_data(rows) + n
    cdef list out = []
    for j in range(n):
        if left[j] <= k:
            out.append(j)
    return out
