# Types for compiling plan.py with Cython (setup.py FROM_SOURCE; see kvcache/radix_cache.pxd).
cdef class PassPlan:
    cdef public object prefill_new
    cdef public object prefill_cached
    cdef public object decode_ctx
    cdef public object decode_tokens
    cdef public object host_load_s
    cdef public bint host_load_overlap
    cdef public object requests
    cdef public object ranks

    cpdef long long token_count(self) except? -1
    cpdef bint decode_only(self) except? -1
