# Types for compiling timeseries.py with Cython (setup.py FROM_SOURCE; see kvcache/radix_cache.pxd).
# The simulation offers every pass end to sample() and every decode stretch to
# passes_to_sample(): compiled, those calls and their throttle tests are C code.
cimport cython


cdef class TimeSeries:
    cdef public double interval
    cdef public dict rows
    cdef public dict _last_t
    cdef public dict _last_passes
    cdef public dict _last_tokens
    cdef public set _idle

    @cython.locals(last=object, r=dict)
    cpdef sample(self, object worker, double now, bint idle=*)

    @cython.locals(last=object, due=cython.longlong)
    cpdef long long passes_to_sample(self, object wid, object ends) except? -1


@cython.locals(lo=cython.Py_ssize_t, hi=cython.Py_ssize_t, mid=cython.Py_ssize_t)
cdef Py_ssize_t _first_due(const double[:] ends, double last, double interval) except -1
