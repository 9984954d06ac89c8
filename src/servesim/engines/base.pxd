# Types for compiling base.py with Cython (setup.py FROM_SOURCE; see kvcache/radix_cache.pxd):
# Engine becomes an extension type, which compiled engines (engines/sglang.pxd) extend and
# Python engines subclass as before.
cdef class Engine:
    cdef public object worker_id
    cdef public object rec
    cdef public object limits
    cdef public list terminated
    cdef public long long prompt_tokens
    cdef public long long cached_prompt_tokens
    cdef public object spec
