# Types for compiling lru_pool.py with Cython (setup.py FROM_SOURCE; see radix_cache.pxd):
# the pool becomes an extension type, so that its fields (the core, the event sinks, the
# block size) are C slots, not instance-dict entries looked up on every call the engines
# make (``num_free_blocks`` is read a few times per pass).
cdef class CompiledLRUPool:
    cdef public object core
    cdef public long long num_blocks
    cdef public long long block_size
    cdef public object policy
    cdef public object on_event
    cdef public object on_evict
    cdef public bint enable_caching
    cdef public double now
    cdef public object refs
    cdef public object hashes
    cdef public object blocks
