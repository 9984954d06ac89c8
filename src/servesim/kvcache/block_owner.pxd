# Types for compiling block_owner.py with Cython (setup.py FROM_SOURCE; see radix_cache.pxd).
# The compiled block pool (_lru_core.pyx) cimports this type to read these fields in C.
from cpython.array cimport array
from servesim.workload.request cimport Request


cdef class BlockOwner:
    cdef public Request req
    cdef public array blocks  # a block list (kvcache/block_pool.py:block_list)
    cdef public object chain
    cdef public long long n_cached
    cdef public long long private_from
    cdef public array memo
    cdef public long long memo_at
    cdef public object memo_of
    cdef public long long memo_tag

    cpdef _own(self, Request req)
    cpdef forget_prefix(self)
