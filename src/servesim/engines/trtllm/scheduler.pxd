# Types for compiling scheduler.py with Cython (setup.py FROM_SOURCE; see kvcache/radix_cache.pxd).
cimport cython
from servesim.workload.request cimport Request
from servesim.engines.blockkv.manager cimport BlockKVEngine
from servesim.kvcache.block_owner cimport BlockOwner


cdef class TReq(BlockOwner):  # req, blocks, chain, n_cached: kvcache/block_owner.pxd
    cdef public long long max_new
    cdef public long long ctx_len
    cdef public long long target
    cdef public long long generated
    cdef public long long computed
    cdef public long long sched
    cdef public bint context
    cdef public long long hit
    cdef public long long host_hit
    cdef public bint admitted_once


cdef class _TBatch:
    cdef public list contexts
    cdef public list gens
    cdef public bint context_fit
    cdef public bint paused
    cdef public bint held


cdef class TRTLLMEngine(BlockKVEngine):
    cdef public object opt
    cdef public long long max_batch
    cdef public long long max_tokens
    cdef public bint chunking
    cdef public bint no_evict
    cdef public long long max_seq_len
    cdef public long long max_len
    cdef public list active
    cdef public _TBatch _last
    cdef public list ready
    cdef public bint batch_wait
    cdef public long long batch_wait_timeout
    cdef public double batch_wait_tokens
    cdef public long long batch_wait_count
    cdef public long long _lead_gens

    cpdef add_request(self, Request req, double now, long long kv_ready=*)
    cpdef bint has_work(self)
    cpdef long long _blocks_for(self, long long tokens)
    cpdef long long _drafts(self)
    cpdef long long _remaining_to_completion(self, TReq tr)

    @cython.locals(d=cython.longlong)
    cpdef long long _one_step(self, TReq tr)

    cpdef long long _lookup(self, TReq tr)
    cpdef _cache_blocks(self, TReq tr, long long upto)

    @cython.locals(d=cython.longlong, need=cython.longlong)
    cpdef _alloc_gen(self, TReq tr)

    @cython.locals(bs=cython.longlong, tr=TReq)
    cpdef _alloc_gens(self, list gens)

    @cython.locals(tr=TReq)
    cpdef _give_blocks(self, list owners)

    cpdef _release(self, TReq tr)
    cpdef _pause(self, TReq tr)

    @cython.locals(active=list, fitting=list, tr=TReq, reserved=cython.longlong, available=cython.longlong,
                   need=cython.longlong, free=cython.longlong, reqs=list, paused=cython.bint, i=cython.Py_ssize_t,
                   j=cython.Py_ssize_t, v=TReq, before=cython.longlong)
    cpdef tuple _capacity(self)

    @cython.locals(fitting=list, paused=cython.bint, budget=cython.longlong, step_tokens=cython.longlong,
                   lead=cython.longlong, n_take=cython.longlong, gens=list, tokens=cython.longlong,
                   count=cython.longlong, tentative=list, contexts=list, context_fit=cython.bint, tr=TReq,
                   start=cython.longlong, rem=cython.longlong, cap=cython.longlong, chunk=cython.longlong,
                   held=cython.bint, new_ctx=list, loading=cython.longlong, batch=_TBatch, kw=dict)
    cpdef object schedule(self, double now)

    @cython.locals(batch=_TBatch, emitted=list, tr=TReq)
    cpdef complete(self, object plan, double end)

    @cython.locals(batch=_TBatch, reqs=list, k=cython.longlong, bs=cython.longlong, n=cython.Py_ssize_t, c0=list,
                   j=cython.Py_ssize_t, tr=TReq)
    cpdef complete_stretch(self, object plan, object ends)

    @cython.locals(done=list, tr=TReq, gone=set)
    cpdef _finish_done(self, list reqs, double end)

    @cython.locals(batch=_TBatch, gens=list, n=cython.Py_ssize_t, generating=cython.Py_ssize_t, tr=TReq,
                   bs=cython.longlong, view=cython.longlong[::1], limit=cython.longlong, left=cython.longlong,
                   j=cython.Py_ssize_t)
    cpdef long long decode_stretch_limit(self)

    cpdef bint _held_stays_held(self, _TBatch batch)


@cython.locals(out=object, view=cython.longlong[::1], i=cython.Py_ssize_t, tr=TReq)
cpdef object _indices(list reqs)

@cython.locals(out=object, view=cython.longlong[::1], i=cython.Py_ssize_t, tr=TReq)
cpdef object _decode_contexts(list gens)

@cython.locals(new=object, cached=object, vnew=cython.longlong[::1], vcached=cython.longlong[::1],
               i=cython.Py_ssize_t, tr=TReq)
cpdef tuple _context_chunks(list contexts)
