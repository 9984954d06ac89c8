# Types for compiling manager.py with Cython (setup.py FROM_SOURCE; see kvcache/radix_cache.pxd).
# The vLLM and TensorRT-LLM engines (engines/vllm/scheduler.pxd, engines/trtllm/scheduler.pxd)
# extend this type and call its methods as C methods.
cimport cython
from servesim.workload.request cimport Request
from servesim.engines.base cimport Engine
from servesim.kvcache.block_owner cimport BlockOwner


@cython.locals(us=cython.longlong, need=cython.longlong, have=cython.longlong, head=cython.longlong)
cpdef object extend_unit_chain(Request req, object chain, long long n_blocks, long long block_size)


cdef class BlockKVEngine(Engine):
    cdef public long long bs
    cdef public long long num_blocks
    cdef public long long capacity
    cdef public bint caching
    cdef public object _arith
    cdef public object pool
    cdef public bint _belady
    cdef public long long retractions
    cdef public object hostlink
    cdef public object host
    cdef public long long host_loaded_tokens

    cpdef bint _reject_unfit(self, Request req, double now, long long max_len, str max_len_key)
    cpdef object _chain(self, BlockOwner owner, long long n_blocks)
    cpdef list _hashes(self, BlockOwner owner, long long start, long long stop)

    @cython.locals(cap=cython.longlong)
    cpdef long long _cached_blocks(self, BlockOwner owner, long long tokens)

    @cython.locals(cap=cython.longlong)
    cpdef long long _host_blocks(self, BlockOwner owner, long long hit, long long tokens)

    @cython.locals(stop=cython.longlong)
    cpdef _cache_full(self, BlockOwner owner, long long n_full)

    cpdef _register(self, BlockOwner owner, long long start, long long stop)
    cpdef _free_blocks(self, BlockOwner owner)
    cpdef _finish_owner(self, BlockOwner owner, double end, str cut_reason, bint cut)
