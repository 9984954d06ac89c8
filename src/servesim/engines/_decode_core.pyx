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


def left_min(const long long[:, :] rows):
    """``rows[1].min()``, or the empty prefix's limit."""
    cdef Py_ssize_t j, n = rows.shape[1]
    cdef long long best
    if n == 0:
        return NO_LIMIT
    best = rows[1, 0]
    for j in range(1, n):
        if rows[1, j] < best:
            best = rows[1, j]
    return best


def advance_rows(const long long[:, :] rows, long long k, long long left_min_):
    """The prefix's rows after ``k`` decode passes, less the requests that finished.

    Returns ``(rows, left_min, kept)``: ``kept`` lists the positions that remain, or is None
    when every request remains (``left_min_ > k``).
    """
    cdef Py_ssize_t j, m = 0, n = rows.shape[1]
    cdef long long best = NO_LIMIT, left
    if left_min_ > k:
        out = np.empty((3, n), dtype=np.int64)
        _advance_into(out, rows, k)
        return out, left_min_ - k, None
    cdef list kept = []
    for j in range(n):
        if rows[1, j] - k > 0:
            kept.append(j)
    m = len(kept)
    out = np.empty((3, m), dtype=np.int64)
    cdef long long[:, ::1] o = out
    cdef Py_ssize_t i = 0
    for j in kept:
        o[0, i] = rows[0, j] + k
        left = rows[1, j] - k
        o[1, i] = left
        o[2, i] = rows[2, j]
        if left < best:
            best = left
        i += 1
    return out, best, kept


cdef void _advance_into(long long[:, ::1] o, const long long[:, :] rows, long long k):
    cdef Py_ssize_t j
    for j in range(rows.shape[1]):
        o[0, j] = rows[0, j] + k
        o[1, j] = rows[1, j] - k
        o[2, j] = rows[2, j]


def decode_due(const long long[:] computed, long long bs, bint caching):
    """A pass of the prefix: its contexts and the requests with a block event.

    Returns ``(ctx, due, due_computed, opens)``: ``ctx = computed + 1``; ``due`` the positions
    whose pass opens a block (``ctx % bs == 1 % bs``) or, with prefix caching, fills one
    (``ctx % bs == 0``), in order; ``due_computed`` their computed tokens; ``opens`` how many
    open a block.
    """
    cdef Py_ssize_t j, n = computed.shape[0]
    cdef long long r, one = 1 % bs
    cdef long long opens = 0
    ctx = np.empty(n, dtype=np.int64)
    cdef long long[::1] cx = ctx
    cdef list due = [], due_c = []
    for j in range(n):
        cx[j] = computed[j] + 1
        r = cx[j] % bs
        if r == one:
            opens += 1
        if (r <= 1) if caching else (r == one):
            due.append(j)
            due_c.append(computed[j])
    return ctx, due, due_c, opens
