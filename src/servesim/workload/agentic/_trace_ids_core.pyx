# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled :mod:`servesim.workload.agentic.trace_ids`: the check, the array conversion and the
shared-int lookup of a trace's block ids, one C loop each (the Python versions make three
passes, or build intermediate lists).  ``tests/workload/test_trace_ids_core.py`` compares each
with its Python version.
"""

import numpy as np
cimport numpy as cnp
from cpython.long cimport PyLong_AsUnsignedLongLong
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_New, PyTuple_SET_ITEM
from cpython.ref cimport Py_INCREF

cnp.import_array()


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
    """``tuple(ints[p] for p in pos)`` for an int64 array of valid indices."""
    cdef cnp.int64_t[::1] p = np.ascontiguousarray(pos, dtype=np.int64)
    cdef Py_ssize_t i, n = p.shape[0]
    cdef Py_ssize_t size = PyList_GET_SIZE(ints)
    cdef tuple out = PyTuple_New(n)
    cdef object x
    for i in range(n):
        if p[i] < 0 or p[i] >= size:
            raise IndexError(f"position {p[i]} outside the {size} interned ids")
        x = <object>PyList_GET_ITEM(ints, p[i])
        Py_INCREF(x)
        PyTuple_SET_ITEM(out, i, x)
    return out
