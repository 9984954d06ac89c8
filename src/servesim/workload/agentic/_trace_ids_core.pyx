# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled :mod:`servesim.workload.agentic.trace_ids`: the check, the array conversion, the
shared-int lookup, the parse from text and the cut from a row's line of a trace's block ids, one C loop each (the Python versions make three
passes, or build intermediate lists).  ``tests/workload/test_trace_ids_core.py`` compares each
with its Python version.
"""

import numpy as np
cimport numpy as cnp
from cpython.unicode cimport PyUnicode_1BYTE_KIND
from cpython.long cimport PyLong_AsUnsignedLongLong
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_New, PyTuple_SET_ITEM
from cpython.ref cimport Py_INCREF

cnp.import_array()


cdef extern from "Python.h":
    void PyObject_GC_UnTrack(void* op)
    int PyUnicode_KIND(object o)
    void* PyUnicode_DATA(object o)
    Py_UCS4 PyUnicode_READ(int kind, void* data, Py_ssize_t index)

_KEY = '"hash_ids"'


def ids_valid(list v) -> bool:
    """Whether every element is an ``int`` (not a bool, not a float) in [0, 2**64)."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(v)
    cdef object x
    for i in range(n):
        x = <object>PyList_GET_ITEM(v, i)
        if type(x) is not int:
            return False
        try:
            PyLong_AsUnsignedLongLong(x)  # negative or >= 2**64: OverflowError
        except OverflowError:
            return False
    return True


def id_array(ids) -> cnp.ndarray:
    """The ids (each in [0, 2**64)) as a uint64 array.  Anything but a list or tuple of such
    ints goes to numpy as it is (its result, or its error)."""
    cdef Py_ssize_t i, n
    cdef bint is_list = type(ids) is list
    if not is_list and type(ids) is not tuple:
        return np.asarray(ids, dtype=np.uint64)
    n = len(ids)
    out = np.empty(n, dtype=np.uint64)
    cdef cnp.uint64_t[::1] view = out
    cdef object x
    for i in range(n):
        x = <object>(PyList_GET_ITEM(ids, i) if is_list else PyTuple_GET_ITEM(ids, i))
        if type(x) is not int:
            return np.asarray(ids, dtype=np.uint64)
        try:
            view[i] = PyLong_AsUnsignedLongLong(x)
        except OverflowError:
            return np.asarray(ids, dtype=np.uint64)
    return out


def shared_ids(list ints, cnp.ndarray pos) -> tuple:
    """``tuple(ints[p] for p in pos)`` for an int64 array of valid indices.

    A tuple of ints alone leaves the cyclic collector's care at once: it can be in no cycle
    (the collector untracks such tuples itself, but only after traversing them once: on an
    AgentX trace, millions of ids in one young-generation collection)."""
    cdef cnp.int64_t[::1] p = np.ascontiguousarray(pos, dtype=np.int64)
    cdef Py_ssize_t i, n = p.shape[0]
    cdef Py_ssize_t size = PyList_GET_SIZE(ints)
    cdef tuple out = PyTuple_New(n)
    cdef object x
    cdef bint ints_only = True
    for i in range(n):
        if p[i] < 0 or p[i] >= size:
            raise IndexError(f"position {p[i]} outside the {size} interned ids")
        x = <object>PyList_GET_ITEM(ints, p[i])
        ints_only = ints_only and type(x) is int
        Py_INCREF(x)
        PyTuple_SET_ITEM(out, i, x)
    if ints_only:
        PyObject_GC_UnTrack(<void*>out)
    return out


cdef inline bint _is_space(unsigned char c) nogil:
    return c == 32 or c == 9 or c == 10 or c == 13  # JSON's whitespace: space, tab, LF, CR


cdef inline bint _is_space_char(Py_UCS4 c) nogil:
    return c == 32 or c == 9 or c == 10 or c == 13


def parse_id_list(const unsigned char[::1] text):
    """The ids of ``text``, a JSON array of plainly written integers in [0, 2**64), as a uint64
    array; None for any other text.  Two passes: count the commas, then read the digits."""
    return _parse_ids(&text[0] if text.shape[0] else NULL, text.shape[0])


cdef object _parse_ids(const unsigned char* text, Py_ssize_t n):
    """:func:`parse_id_list` on ``n`` characters at ``text`` (one byte each)."""
    cdef Py_ssize_t i = 0, k = 0, count = 1
    cdef cnp.uint64_t v, d
    cdef cnp.uint64_t top = 0xFFFFFFFFFFFFFFFF
    cdef Py_ssize_t digits
    if n < 2 or text[0] != 91 or text[n - 1] != 93:  # '[' ... ']'
        return None
    for i in range(1, n - 1):
        if text[i] == 44:  # ','
            count += 1
    i = 1
    while i < n - 1 and _is_space(text[i]):
        i += 1
    if i == n - 1:  # no element
        return np.empty(0, dtype=np.uint64)
    out = np.empty(count, dtype=np.uint64)
    cdef cnp.uint64_t[::1] view = out
    while True:
        v = 0
        digits = 0
        while i < n - 1 and 48 <= text[i] <= 57:
            d = text[i] - 48
            if digits == 1 and v == 0:  # a leading zero
                return None
            if digits >= 19 and v > (top - d) // 10:  # 2**64 or more (19 digits stay below it)
                return None
            v = v * 10 + d
            digits += 1
            i += 1
        if digits == 0:
            return None
        view[k] = v
        k += 1
        while i < n - 1 and _is_space(text[i]):
            i += 1
        if i == n - 1:
            break
        if text[i] != 44 or k == count:
            return None
        i += 1
        while i < n - 1 and _is_space(text[i]):
            i += 1
    if k != count:
        return None
    return out


def cut_id_list(str line, Py_ssize_t min_chars):
    """``line`` with the value of its one ``"hash_ids"`` key cut out and ``0`` put in its
    place, and the ids of that value as a uint64 array; None where the key is missing or
    written twice, its value is not a list of plainly written integers in [0, 2**64), the
    list's text is shorter than ``min_chars``, or the line holds a ``\\u`` escape (the Python
    version says why the caller's check then holds).  The searches, then the two passes of
    :func:`parse_id_list` over the list's text where it lies: no copy of it."""
    cdef Py_ssize_t size = len(line), at, end
    cdef int kind = PyUnicode_KIND(line)
    cdef void* data = PyUnicode_DATA(line)
    at = line.find(_KEY)
    if at < 0 or line.find(_KEY, at + len(_KEY)) >= 0 or (line.find("\\") >= 0 and line.find("\\u") >= 0):
        return None
    at += len(_KEY)
    while at < size and _is_space_char(PyUnicode_READ(kind, data, at)):
        at += 1
    if at >= size or PyUnicode_READ(kind, data, at) != 58:  # ':'
        return None
    at += 1
    while at < size and _is_space_char(PyUnicode_READ(kind, data, at)):
        at += 1
    if at >= size or PyUnicode_READ(kind, data, at) != 91:  # '['
        return None
    end = line.find("]", at)
    if end < 0 or end + 1 - at < min_chars:
        return None
    if kind == PyUnicode_1BYTE_KIND:
        ids = _parse_ids(<const unsigned char*>data + at, end + 1 - at)
    else:  # wide characters elsewhere on the line: the list's own text, where it is narrow
        text = line[at:end + 1]
        if PyUnicode_KIND(text) != PyUnicode_1BYTE_KIND:
            return None
        ids = _parse_ids(<const unsigned char*>PyUnicode_DATA(text), end + 1 - at)
    if ids is None:
        return None
    return line[:at] + "0" + line[end + 1:], ids


def rank_ids(cnp.ndarray flat, table=None):
    """The Python version's ranks (sorted distinct ids, each element's position among them), in
    C loops over a ``table`` (int64, indexed by id, larger than every id; contents on entry do
    not matter).  Where the ids span less than twice as many values as ``flat`` holds, each
    distinct id is marked in the table and the span read in order: already sorted, where the
    Python version sorts them; otherwise the Python version's steps.  Without a table, numpy's."""
    if table is None:
        uniq = np.unique(flat)
        return uniq, uniq.searchsorted(flat).astype(np.int64)
    cdef const cnp.uint64_t[::1] ids = np.ascontiguousarray(flat, dtype=np.uint64)
    cdef cnp.int64_t[::1] tab = table
    cdef Py_ssize_t n = ids.shape[0], i, m = 0, v, top = -1
    cdef cnp.uint64_t[::1] u
    for i in range(n):
        if ids[i] >= <cnp.uint64_t>tab.shape[0]:
            raise IndexError(f"id {ids[i]} outside the table of {tab.shape[0]}")
        if <Py_ssize_t>ids[i] > top:
            top = <Py_ssize_t>ids[i]
    if top < 2 * n:  # a dense span: mark, count, then rank in id order
        for v in range(top + 1):
            tab[v] = -1
        for i in range(n):
            tab[ids[i]] = 0
        for v in range(top + 1):
            m += tab[v] == 0
        uniq = np.empty(m, dtype=np.uint64)
        u = uniq
        m = 0
        for v in range(top + 1):
            if tab[v] == 0:
                tab[v] = m
                u[m] = v
                m += 1
    else:  # each id's first seen position; those elements, sorted
        for i in range(n):
            tab[ids[i]] = i
        for i in range(n):
            m += tab[ids[i]] == i
        uniq = np.empty(m, dtype=np.uint64)
        u = uniq
        m = 0
        for i in range(n):
            if tab[ids[i]] == i:
                u[m] = ids[i]
                m += 1
        uniq.sort()
        for i in range(m):
            tab[u[i]] = i
    pos = np.empty(n, dtype=np.int64)
    cdef cnp.int64_t[::1] out = pos
    for i in range(n):
        out[i] = tab[ids[i]]
    return uniq, pos
