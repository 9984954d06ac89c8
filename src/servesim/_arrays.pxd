# numpy arrays through numpy's C API, for the compiled cores (setup.py adds numpy's headers).
# Making an array or reaching its data this way costs a fraction of a Python call to
# ``np.empty`` plus a typed memoryview, which the cores paid several times per pass.
# A module that cimports these must call ``cnp.import_array()`` once at import.
cimport numpy as cnp
from libc.stdint cimport int64_t


cdef inline object new_float64(Py_ssize_t n):
    """A new, uninitialised 1-d float64 array of ``n`` elements."""
    cdef cnp.npy_intp dim = n
    return cnp.PyArray_EMPTY(1, &dim, cnp.NPY_FLOAT64, 0)


cdef inline object new_int64(Py_ssize_t n):
    """A new, uninitialised 1-d int64 array of ``n`` elements."""
    cdef cnp.npy_intp dim = n
    return cnp.PyArray_EMPTY(1, &dim, cnp.NPY_INT64, 0)


cdef inline double* float64_data(object arr) noexcept:
    """The data of an array made by :func:`new_float64`."""
    return <double*>cnp.PyArray_DATA(<cnp.ndarray>arr)


cdef inline int64_t* int64_data(object arr) noexcept:
    """The data of an array made by :func:`new_int64`."""
    return <int64_t*>cnp.PyArray_DATA(<cnp.ndarray>arr)


cdef inline bint _is_c_array(object obj, int ndim, int typenum) noexcept:
    """Whether ``obj`` is a C-contiguous ndarray of ``ndim`` dimensions and numpy type ``typenum``."""
    return (cnp.PyArray_Check(obj) and cnp.PyArray_NDIM(<cnp.ndarray>obj) == ndim
            and cnp.PyArray_TYPE(<cnp.ndarray>obj) == typenum
            and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>obj))


cdef inline object _as_c_array(object obj, int ndim, int typenum):
    """``obj`` as a C-contiguous ndarray of ``ndim`` dimensions and type ``typenum`` (itself
    when it already is one, else a copy cast as ``numpy.ascontiguousarray`` casts)."""
    if _is_c_array(obj, ndim, typenum):
        return obj
    out = cnp.PyArray_FROMANY(obj, typenum, 0, 0, cnp.NPY_ARRAY_C_CONTIGUOUS | cnp.NPY_ARRAY_FORCECAST)
    if cnp.PyArray_NDIM(<cnp.ndarray>out) != ndim:
        raise ValueError(f"expected a {ndim}-d array, got {cnp.PyArray_NDIM(<cnp.ndarray>out)} dimensions")
    return out


cdef inline bint is_int64_vector(object obj) noexcept:
    """Whether ``obj`` is a C-contiguous 1-d int64 ndarray (its data then reads as int64_t*)."""
    return _is_c_array(obj, 1, cnp.NPY_INT64)


cdef inline object new_int64_matrix(Py_ssize_t rows, Py_ssize_t cols):
    """A new, uninitialised C-contiguous ``(rows, cols)`` int64 array."""
    cdef cnp.npy_intp dims[2]
    dims[0] = rows
    dims[1] = cols
    return cnp.PyArray_EMPTY(2, dims, cnp.NPY_INT64, 0)


cdef inline object as_int64_vector(object obj):
    """``obj`` as a C-contiguous 1-d int64 ndarray (itself when it already is one)."""
    return _as_c_array(obj, 1, cnp.NPY_INT64)


cdef inline object as_float64_vector(object obj):
    """``obj`` as a C-contiguous 1-d float64 ndarray (itself when it already is one)."""
    return _as_c_array(obj, 1, cnp.NPY_FLOAT64)


cdef inline object as_int64_matrix(object obj):
    """``obj`` as a C-contiguous 2-d int64 ndarray (itself when it already is one)."""
    return _as_c_array(obj, 2, cnp.NPY_INT64)
