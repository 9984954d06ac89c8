# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled :func:`servesim.kvcache.hashing.id_chain`: a unit chain without a tuple per unit.

``id_chain`` hashes ``(parent, block_id)`` pairs, one per trace unit: on an agentic trace
(contexts of ~2,000 units, re-chained for every turn of a play) that is about a tenth of
the vLLM model's run, spent allocating, hashing and freeing a 2-tuple and an int per unit.
This computes CPython's own ``hash((p, b))`` for two ints in C: the int hash (value modulo
2**61 - 1, with the sign, -1 mapped to -2) and the tuple hash (CPython 3.8+'s xxHash-based
``tuplehash``, ``Objects/tupleobject.c``), so the chain is the same, bit for bit.  A value
that does not fit in 64 bits goes through Python's ``hash``.  The result is checked against
Python's ``hash`` at import, so an interpreter whose hash differs falls back to Python's
(``tests/kvcache/test_hash_core.py`` compares the two on random chains).
"""

from libc.stdint cimport int64_t, uint64_t
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact, PyLong_FromLongLong
from cpython cimport array
from cpython.object cimport Py_SIZE, PyObject
from cpython.sequence cimport PySequence_Fast_ITEMS

cdef uint64_t _MODULUS = (1ULL << 61) - 1  # sys.hash_info.modulus on 64-bit builds
cdef uint64_t _PRIME_1 = 11400714785074694791ULL
cdef uint64_t _PRIME_2 = 14029467366897019727ULL
cdef uint64_t _PRIME_5 = 2870177450012600261ULL


cdef inline uint64_t _mod_mersenne(uint64_t a) noexcept:
    """``a % (2**61 - 1)`` without a division: 2**61 is 1 modulo the modulus, so ``a`` is
    congruent to its low 61 bits plus its high 3, a sum below twice the modulus (a 64-bit
    division per int hash, two per unit, was most of a unit chain's cost)."""
    a = (a & _MODULUS) + (a >> 61)
    return a - _MODULUS if a >= _MODULUS else a


cdef inline int64_t _int_hash(int64_t x) noexcept:
    """``hash(x)`` of a Python int ``x`` that fits in int64."""
    cdef uint64_t a = <uint64_t>x if x >= 0 else (<uint64_t>0) - <uint64_t>x
    cdef int64_t h = <int64_t>_mod_mersenne(a)
    if x < 0:
        h = -h
    return -2 if h == -1 else h


cdef inline uint64_t _lane(uint64_t acc, int64_t item_hash) noexcept:
    acc += <uint64_t>item_hash * _PRIME_2
    acc = (acc << 31) | (acc >> 33)
    return acc * _PRIME_1


cdef inline int64_t _pair_hash(int64_t p, int64_t b) noexcept:
    """``hash((p, b))`` for two ints that fit in int64."""
    cdef uint64_t acc = _PRIME_5
    acc = _lane(acc, _int_hash(p))
    acc = _lane(acc, _int_hash(b))
    acc += 2 ^ (_PRIME_5 ^ 3527539ULL)
    if acc == <uint64_t>-1:
        return 1546275796
    return <int64_t>acc


def _agrees() -> bool:
    """Whether this interpreter's ``hash`` of int pairs is the one computed here."""
    cdef int64_t p, b
    samples = (0, 1, -1, -2, 2, 7, 0x5E12E51A, (1 << 61) - 2, (1 << 61) - 1, 1 << 61, (1 << 62) + 12345,
               (1 << 63) - 1, -(1 << 63), -(1 << 61) + 1, -(1 << 61), 1234567890123456789, -987654321987654321)
    for x in samples:
        for y in samples:
            p, b = x, y
            if _pair_hash(p, b) != hash((x, y)):
                return False
    return True


cdef bint _EXACT = _agrees()


cdef inline int64_t _next_unit(int64_t p, object bid) except? -1:
    """The chain's unit after ``p`` for block id ``bid``: ``hash((p, bid))``, in C for an int that
    fits in int64 (anything else, numpy ints included, is hashed by Python)."""
    cdef int overflow = 1
    cdef int64_t b = 0
    if PyLong_CheckExact(bid):
        b = PyLong_AsLongLongAndOverflow(bid, &overflow)
    if overflow == 0:
        return _pair_hash(p, b)
    return hash((p, bid))


def id_chain(block_ids, parent=0x5E12E51A) -> list:
    """See ``kvcache/hashing.py:id_chain``."""
    cdef list out = []
    cdef int overflow = 0
    cdef int64_t p = 0, b
    cdef bint in_c
    if not _EXACT:
        for bid in block_ids:
            parent = hash((parent, bid))
            out.append(parent)
        return out
    in_c = False
    if PyLong_CheckExact(parent):
        p = PyLong_AsLongLongAndOverflow(parent, &overflow)
        in_c = overflow == 0  # a hash always fits; only a caller's parent may not
    for bid in block_ids:
        overflow = 1
        if PyLong_CheckExact(bid):  # anything else (numpy ints, ...) is hashed by Python
            b = PyLong_AsLongLongAndOverflow(bid, &overflow)
        if in_c and overflow == 0:
            p = _pair_hash(p, b)
            parent = PyLong_FromLongLong(p)
        else:
            parent = hash((parent, bid))
            p = parent
            in_c = True
        out.append(parent)
    return out


def extend_chain(chain, block_ids):
    """See ``kvcache/hashing.py:extend_chain``; a chain list is extended in place, in C."""
    cdef array.array arr
    cdef Py_ssize_t have, m, i
    cdef int64_t p
    if type(chain) is not array.array or (<array.array>chain).ob_descr.typecode != b'q' or not _EXACT:
        n = len(chain)
        chain.extend(id_chain(block_ids, chain[n - 1] if n else 0x5E12E51A))  # (no wraparound here)
        return chain
    arr = <array.array>chain
    have = Py_SIZE(arr)
    p = arr.data.as_longlongs[have - 1] if have else 0x5E12E51A
    if type(block_ids) is not list:
        block_ids = list(block_ids)
    m = len(<list>block_ids)
    array.resize_smart(arr, have + m)
    for i in range(m):
        p = _next_unit(p, (<list>block_ids)[i])
        arr.data.as_longlongs[have + i] = p
    return chain


def extend_chain_slice(chain, ids, Py_ssize_t start, Py_ssize_t stop):
    """See ``kvcache/hashing.py:extend_chain_slice``: a tuple's ids read where they lie.

    A new request's chain covers its whole prompt (~2,000 ids on an agentic trace): a slice
    and a list of it would take and drop a reference to every id, a write to each id's
    object, besides the two allocations.
    """
    cdef array.array arr
    cdef Py_ssize_t have, n, i
    cdef PyObject** items
    cdef int64_t p
    if (type(chain) is not array.array or (<array.array>chain).ob_descr.typecode != b'q' or not _EXACT
            or type(ids) is not tuple or start < 0 or stop < 0):
        return extend_chain(chain, ids[start:stop])
    n = len(<tuple>ids)
    if stop > n:
        stop = n
    if stop <= start:
        return chain
    arr = <array.array>chain
    have = Py_SIZE(arr)
    p = arr.data.as_longlongs[have - 1] if have else 0x5E12E51A
    array.resize_smart(arr, have + (stop - start))
    items = PySequence_Fast_ITEMS(ids)  # borrowed: a tuple, held by ``ids``
    for i in range(start, stop):
        p = _next_unit(p, <object>items[i])
        arr.data.as_longlongs[have + i - start] = p
    return chain
