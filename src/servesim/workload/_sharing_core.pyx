# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled :func:`servesim.workload.sharing.first_unlisted` and :func:`~servesim.workload.sharing.dense_shared_map`.

The vLLM model asks it for every request it receives (the request's first block no other
request lists, ``engines/vllm/scheduler.py:_private_from``), and an agentic request lists
its whole context: a set lookup per id was most of the cost.  Here an int id inside the
byte map of a :class:`~servesim.workload.sharing.SharedBlockIds` is one byte read; any other
id (or any id, for another set) is looked up in the set, as the Python version does.
``tests/workload/test_sharing_core.py`` compares the two.
"""

from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.object cimport PyObject
from cpython.sequence cimport PySequence_Fast, PySequence_Fast_GET_SIZE, PySequence_Fast_ITEMS


cdef inline int _listed(object bid, const unsigned char* bits, long long n, object shared) except -1:
    """1 if ``bid`` is in ``shared``: a byte of its map for an int id inside it, else the set."""
    cdef int overflow = 0
    cdef long long v
    if PyLong_CheckExact(bid):
        v = PyLong_AsLongLongAndOverflow(bid, &overflow)
        if overflow == 0 and 0 <= v < n:
            return bits[v] != 0
    return bid in shared


def first_unlisted(ids, shared) -> int:
    """The position of the first of ``ids`` not in ``shared`` (``len(ids)`` if none)."""
    dense = getattr(shared, "dense", b"")
    if type(dense) is not bytes:
        dense = b""
    cdef const unsigned char* bits = <bytes>dense
    cdef long long n = len(<bytes>dense)
    cdef Py_ssize_t k = 0, i, m
    cdef PyObject** items
    if type(ids) is tuple:  # a request's ids, read in place: no iterator, no reference per id
        items = PySequence_Fast_ITEMS(ids)
        m = PySequence_Fast_GET_SIZE(ids)
        for i in range(m):
            if not _listed(<object>items[i], bits, n, shared):
                return i
        return m
    for bid in ids:
        if not _listed(bid, bits, n, shared):
            return k
        k += 1
    return k


def dense_shared_map(seqs, long long size):
    """The byte map of the ids ``0 .. size - 1`` that ``seqs`` (sequences of ints) list more
    than once in all, or None if one lists anything else (an id outside that range, a
    non-int): the reference is ``workload/sharing.py:python_dense_shared_map``.  Counts in a
    byte per id (saturating at 2) as each id is read: no array of every listed id."""
    if size < 0:
        raise ValueError(f"need size >= 0, got {size}")
    counts = bytearray(size)
    cdef unsigned char* c = counts
    cdef long long v
    cdef int overflow
    cdef Py_ssize_t i, n
    cdef object fast
    cdef PyObject** items
    for seq in seqs:
        fast = PySequence_Fast(seq, "expected a sequence of block ids")
        n = PySequence_Fast_GET_SIZE(fast)
        items = PySequence_Fast_ITEMS(fast)
        for i in range(n):
            bid = <object>items[i]
            if not PyLong_CheckExact(bid):
                return None
            overflow = 0
            v = PyLong_AsLongLongAndOverflow(bid, &overflow)
            if overflow != 0 or v < 0 or v >= size:
                return None
            if c[v] < 2:
                c[v] += 1
    for v in range(size):
        c[v] = 1 if c[v] == 2 else 0
    return bytes(counts)
