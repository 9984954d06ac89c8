# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled :func:`servesim.workload.request.sequence_units`, ``sequence_block_ids`` and
``sequence_segments``.

Every engine reads a request's sequence as units ``(block_id, tokens)`` several times per
request (prefix matching, insertion, block hashes).  The Python function builds the list in
the interpreter; this builds the same list, with the same block ids, in C.
``tests/workload/test_units_core.py`` compares each with its Python version.
"""

from servesim.workload.request import OUTPUT_ID_BASE
from servesim.workload.request cimport Request

cdef long long _BASE = OUTPUT_ID_BASE
cdef long long INDEX_IN_C = 1LL << 38


cdef inline object _block_id(Request req, object ids, object out_ids, Py_ssize_t n_ids, Py_ssize_t n_out, long long k):
    """Block ``k``'s id in ``req``'s sequence (see ``sequence_units``)."""
    if k < n_ids:
        return ids[k]
    if k - n_ids < n_out:
        return out_ids[k - n_ids]
    # output_block_id(req.index, k - n_ids): in C while it fits in 64 bits (any index below 2**38)
    if 0 <= req.index < INDEX_IN_C:
        return _BASE - (req.index << 24) + n_ids - k
    return OUTPUT_ID_BASE - ((<object>req.index) << 24) + n_ids - k


def sequence_units(Request req, long long n_tokens) -> list:
    """Units covering the first ``n_tokens`` of ``req``'s sequence (see the Python version)."""
    cdef long long bs = req.block_size
    ids = req.hash_ids
    out_ids = req.output_hash_ids
    cdef Py_ssize_t n_ids = len(ids), n_out = len(out_ids)
    cdef long long n_full, rem, n_blocks, k
    cdef list units = []
    if n_tokens <= 0:
        return units
    n_full = n_tokens // bs
    rem = n_tokens - n_full * bs
    n_blocks = n_full + (1 if rem else 0)
    for k in range(n_blocks):
        units.append((_block_id(req, ids, out_ids, n_ids, n_out, k), bs if k < n_full else rem))
    return units


def sequence_block_ids(Request req, long long first, long long stop) -> list:
    """Ids of blocks ``first .. stop - 1`` of ``req``'s block grid (see the Python version)."""
    ids = req.hash_ids
    out_ids = req.output_hash_ids
    cdef Py_ssize_t n_ids = len(ids), n_out = len(out_ids)
    cdef list out
    cdef long long k, head
    if first < 0:
        first = 0
    if first < stop and first < n_ids:  # the prompt's ids: one slice (a new prompt's chain reads them all)
        head = stop if stop < n_ids else n_ids
        out = list(ids[first:head])
        first = head
    else:
        out = []
    for k in range(first, stop):
        out.append(_block_id(req, ids, out_ids, n_ids, n_out, k))
    return out


def sequence_segments(Request req, long long start, long long stop) -> list:
    """Segments of tokens ``[start, stop)`` of ``req``'s sequence (see the Python version):
    the blocks before ``start`` are skipped, not built."""
    cdef long long bs = req.block_size
    ids = req.hash_ids
    out_ids = req.output_hash_ids
    cdef Py_ssize_t n_ids = len(ids), n_out = len(out_ids)
    cdef list segs = []
    cdef long long k, first, end
    if start < 0:
        start = 0
    if stop <= start:
        return segs
    for k in range(start // bs, (stop - 1) // bs + 1):
        first = start - k * bs
        if first < 0:
            first = 0
        end = stop - k * bs
        if end > bs:
            end = bs
        segs.append((_block_id(req, ids, out_ids, n_ids, n_out, k), first, end))
    return segs
