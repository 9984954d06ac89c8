# Types for compiling trtllm.py with Cython (setup.py FROM_SOURCE; see kvcache/radix_cache.pxd).
# Attributes only: the methods compile as they are (no typed locals yet).
from servesim.engines.base cimport Engine


cdef class TReq:
    cdef public object req
    cdef public long long max_new
    cdef public long long ctx_len
    cdef public long long target
    cdef public long long generated
    cdef public long long computed
    cdef public long long sched
    cdef public bint context
    cdef public list blocks
    cdef public list chain
    cdef public long long n_cached
    cdef public long long hit
    cdef public long long host_hit
    cdef public bint admitted_once


cdef class _TBatch:
    cdef public list contexts
    cdef public list gens
    cdef public bint context_fit
    cdef public bint paused
    cdef public bint held


cdef class TRTLLMEngine(Engine):
    cdef public object opt
    cdef public long long bs
    cdef public long long num_blocks
    cdef public long long capacity
    cdef public bint reuse
    cdef public object _arith
    cdef public object pool
    cdef public bint _belady
    cdef public object max_batch
    cdef public object max_tokens
    cdef public bint chunking
    cdef public bint no_evict
    cdef public object max_seq_len
    cdef public object max_len
    cdef public list active
    cdef public long long retractions
    cdef public _TBatch _last
    cdef public list ready
    cdef public object hostlink
    cdef public object host
    cdef public long long host_loaded_tokens
    cdef public bint batch_wait
    cdef public object batch_wait_timeout
    cdef public object batch_wait_tokens
    cdef public long long batch_wait_count
    cdef public long long _lead_gens
