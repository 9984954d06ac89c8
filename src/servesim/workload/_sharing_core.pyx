# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled :func:`servesim.workload.sharing.first_unlisted`.

The vLLM model asks it for every request it receives (the request's first block no other
request lists, ``engines/vllm/scheduler.py:_private_from``), and an agentic request lists
its whole context: a set lookup per id was most of the cost.  Here an int id inside the
byte map of a :class:`~servesim.workload.sharing.SharedBlockIds` is one byte read; any other
id (or any id, for another set) is looked up in the set, as the Python version does.
``tests/workload/test_sharing_core.py`` compares the two.
"""

from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact


def first_unlisted(ids, shared) -> int:
    """The position of the first of ``ids`` not in ``shared`` (``len(ids)`` if none)."""
    dense = getattr(shared, "dense", b"")
    if type(dense) is not bytes:
        dense = b""
    cdef const unsigned char* bits = <bytes>dense
    cdef long long n = len(<bytes>dense), v
    cdef int overflow
    cdef Py_ssize_t k = 0
    for bid in ids:
        if PyLong_CheckExact(bid):
            overflow = 0
            v = PyLong_AsLongLongAndOverflow(bid, &overflow)
            if overflow == 0 and 0 <= v < n:
                if not bits[v]:
                    return k
                k += 1
                continue
        if bid not in shared:
            return k
        k += 1
    return k
