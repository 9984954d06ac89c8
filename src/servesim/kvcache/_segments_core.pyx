# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled versions of the radix cache's segment arithmetic (:mod:`servesim.kvcache.segments`).

The SGLang model reads every request's sequence as segments ``(block_id, start, end)`` and
walks the radix tree comparing them, several times per request.  The Python functions
spend most of their time unpacking tuples in the interpreter; these take the same lists of
tuples and return the same values, with the loops in C.  ``tests/kvcache/test_segments_core.py``
compares each with its Python version on random inputs.
"""


def units_to_segments(units, n_tokens=None) -> list:
    """Segments covering the first ``n_tokens`` (default: all) tokens of ``units``."""
    cdef list segs = []
    cdef long long left = 0, n
    cdef bint limited = n_tokens is not None
    if limited:
        left = n_tokens
    for unit in units:
        bid, on = unit
        n = on
        if limited:
            if left <= 0:
                break
            if n > left:
                n = left
            left -= n
        if n > 0:
            segs.append((bid, 0, n))
    return segs


def segments_tokens(segs) -> int:
    """Number of tokens the segments cover."""
    cdef long long total = 0
    cdef long long s, e
    for seg in segs:
        _, os, oe = seg
        s = os
        e = oe
        total += e - s
    return total


def common_prefix(key, list segs, Py_ssize_t i, long long s) -> tuple:
    """Tokens shared by ``key`` and ``segs`` read from segment ``i``, token ``s``: ``(matched, i, s)``."""
    cdef long long m = 0, ks, ke, e, end
    cdef Py_ssize_t n = len(segs)
    for kseg in key:
        if i >= n:
            break
        kb, oks, oke = kseg
        bid, _, oe = segs[i]
        ks = oks
        if kb != bid or ks != s:
            break
        ke = oke
        e = oe
        end = ke if ke < e else e
        m += end - s
        if end == e:
            i += 1
            s = 0
            if end < ke:  # the input ends inside this key segment
                break
        else:
            s = end
    return m, i, s


def advance(list segs, Py_ssize_t i, long long s, long long t) -> tuple:
    """Input position ``t`` tokens after segment ``i``, token ``s``."""
    cdef long long e, room
    while t > 0:
        e = (segs[i])[2]
        room = e - s
        if t < room:
            return i, s + t
        t -= room
        i += 1
        s = 0
    return i, s
