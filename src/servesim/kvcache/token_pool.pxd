# Types for compiling token_pool.py with Cython (setup.py FROM_SOURCE; see radix_cache.pxd).
cdef class TokenPool:
    cdef public long long capacity
    cdef public long long free_tokens
    cdef public long long private_tokens
    cdef public long long cached_tokens

    cpdef bint alloc(self, long long n)
    cpdef free(self, long long n)
    cpdef adopt(self, long long n)
    cpdef release_cached(self, long long n)
