# Types for compiling frontend.py with Cython (setup.py FROM_SOURCE; see kvcache/radix_cache.pxd).
cdef class SchedulerOverheadStepTime:
    cdef public object inner
    cdef public object pass_s
    cdef public object per_request_s

    cpdef pass_time(self, plan)
    cpdef decode_stretch_times(self, decode_ctx, steps)
    cpdef decode_stretch_ends(self, decode_ctx, steps, now)
