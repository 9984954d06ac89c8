# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled :func:`servesim.workload.request.sequence_units`.

Every engine reads a request's sequence as units ``(block_id, tokens)`` several times per
request (prefix matching, insertion, block hashes).  The Python function builds the list in
the interpreter; this builds the same list, with the same block ids, in C.
``tests/workload/test_units_core.py`` compares the two.
"""

from servesim.workload.request import OUTPUT_ID_BASE


def sequence_units(req, long long n_tokens) -> list:
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
    cdef object base = None
    for k in range(n_blocks):
        if k < n_ids:
            bid = ids[k]
        elif k - n_ids < n_out:
            bid = out_ids[k - n_ids]
        else:
            if base is None:  # output_block_id(req.index, k - n_ids), in Python ints
                base = OUTPUT_ID_BASE - (req.index << 24) + n_ids
            bid = base - k
        units.append((bid, bs if k < n_full else rem))
    return units
