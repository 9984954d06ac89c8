# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled arithmetic of the block-pool engines' decode passes.

The vLLM model keeps its leading plain decodes as a ``(3, n)`` int64 array (computed tokens,
remaining output, recorder row; ``engines/vllm.py:_DecodePrefix``) and the block-pool engines
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

cdef long long NO_LIMIT = 1 << 62  # vllm._DecodePrefix's left_min of an empty prefix


def stretch_within_free_blocks(const long long[:] computed, long long block_size, long long free_blocks,
                               long long limit):
    """See ``engines/blocks.py:stretch_within_free_blocks``."""
    cdef long long lo, hi, mid
    if limit <= 1:
        return 1
    if _blocks_opened(computed, block_size, limit) <= free_blocks:
        return limit
    lo, hi = 1, limit - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _blocks_opened(computed, block_size, mid) <= free_blocks:
            lo = mid
        else:
            hi = mid - 1
    return lo


cdef long long _blocks_opened(const long long[:] computed, long long bs, long long k):
    cdef long long total = 0, c
    cdef Py_ssize_t j
    for j in range(computed.shape[0]):
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


def advance_rows(rows, long long k, long long left_min_):
    """The prefix's rows after ``k`` decode passes, less the requests that finished.

    Returns ``(rows, left_min, kept)``: ``kept`` lists the positions that remain, or is None
    when every request remains (``left_min_ > k``).  (The rows are a ``(3, n)`` int64 array.)
    """
    rows = as_int64_matrix(rows)
    cdef Py_ssize_t j, m = 0, n = cnp.PyArray_DIM(<cnp.ndarray>rows, 1)
    cdef const int64_t* r = int64_data(rows)
    cdef long long best = NO_LIMIT, left
    cdef int64_t* o
    if left_min_ > k:
        out = new_int64_matrix(3, n)
        o = int64_data(out)
        for j in range(n):
            o[j] = r[j] + k
            o[n + j] = r[n + j] - k
            o[2 * n + j] = r[2 * n + j]
        return out, left_min_ - k, None
    cdef list kept = []
    for j in range(n):
        if r[n + j] - k > 0:
            kept.append(j)
    m = len(kept)
    out = new_int64_matrix(3, m)
    o = int64_data(out)
    cdef Py_ssize_t i = 0
    for j in kept:
        o[i] = r[j] + k
        left = r[n + j] - k
        o[m + i] = left
        o[2 * m + i] = r[2 * n + j]
        if left < best:
            best = left
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
