# Types for compiling frontend.py with Cython (setup.py FROM_SOURCE; see kvcache/radix_cache.pxd).
from servesim.workload.request cimport Request


cdef class Frontend:
    cdef public object p
    cdef public double _free_at
    cdef public double _tokenize_base_s
    cdef public double _tokenize_per_token_s
    cdef public double _request_overhead_s

    cpdef double tokenize_seconds(self, double input_length)
    cpdef double admit_time(self, Request req, double now) except? -1


cdef class SchedulerOverheadStepTime:
    cdef public object inner
    cdef public object pass_s
    cdef public object per_request_s
    cdef public bint overlapped

    cpdef pass_time(self, plan)
    cpdef decode_stretch_times(self, decode_ctx, steps)
    cpdef decode_stretch_ends(self, decode_ctx, steps, now)
