# Types for compiling scheduler.py with Cython (setup.py FROM_SOURCE; see kvcache/radix_cache.pxd).
cimport cython
from servesim.workload.request cimport Request
from servesim.engines.blockkv.manager cimport BlockKVEngine
from servesim.kvcache.block_owner cimport BlockOwner
from servesim.perf.plan cimport PassPlan


cdef class VReq(BlockOwner):  # req, blocks, chain, n_cached: kvcache/block_owner.pxd
    cdef public long long max_new
    cdef public long long generated
    cdef public long long computed
    cdef public long long sched
    cdef public bint admitted_once
    cdef public long long num_tokens


cdef class _DecodePrefix:
    cdef public list reqs
    cdef public object rows
    cdef public long long left_min
    cdef object _computed
    cdef object _idx

    cpdef _DecodePrefix advanced(self, long long k, object arith)

    @cython.locals(reqs=list, rows=object, computed=list, left=list, out=list, j=cython.Py_ssize_t, vr=VReq,
                   g=cython.longlong, c=cython.longlong, lf=cython.longlong)
    cpdef list write_back(self, long long k=*, list only=*)

    cpdef _DecodePrefix extended(self, list more, object arith)


cdef class _VBatch:
    cdef public list reqs
    cdef public bint decode_only
    cdef public bint preempted
    cdef public object idx
    cdef public object computed
    cdef public long long left_min
    cdef public _DecodePrefix prefix


cdef class VLLMEngine(BlockKVEngine):
    cdef public object opt
    cdef public long long budget
    cdef public long long max_seqs
    cdef public long long max_model_len
    cdef public long long max_len
    cdef public bint chunked_prefill
    cdef public object threshold
    cdef public object waiting
    cdef public list running
    cdef public _VBatch _last
    cdef public _DecodePrefix _prefix
    cdef public _DecodePrefix _lazy
    cdef public bint _in_flight
    cdef public object ready
    cdef public long long _loading
    cdef public long long fast_decodes_min
    cdef public object _shared

    cpdef add_request(self, Request req, double now, long long kv_ready=*)
    cpdef bint has_work(self)
    @cython.locals(n_full=cython.longlong)
    cpdef _cache_blocks(self, VReq vr, long long upto)

    cpdef long long _lookup(self, VReq vr)

    @cython.locals(bs=cython.longlong, end=cython.longlong)
    cpdef bint _allocate(self, VReq vr, long long n)

    @cython.locals(start=cython.longlong, need=cython.longlong)
    cpdef bint _allocate_new(self, VReq vr, long long hit, long long n, long long host_hit=*)

    cpdef _preempt(self, VReq vr)

    @cython.locals(budget=cython.longlong, running=list, preempted=cython.bint, dt=cython.longlong,
                   bs=cython.longlong, caching=cython.bint, m=cython.Py_ssize_t, scheduled=list, prefill=list,
                   ctx=list, lefts=list, lead=cython.Py_ssize_t, i=cython.Py_ssize_t, vr=VReq, c=cython.longlong,
                   n=cython.longlong, end=cython.longlong, ok=cython.bint, victim=VReq,
                   n_running_sched=cython.Py_ssize_t, batch=_VBatch, whole=cython.bint, plan=PassPlan,
                   pre=_DecodePrefix, prefix=_DecodePrefix)
    cpdef object schedule(self, double now)

    @cython.locals(m=cython.Py_ssize_t, reuse=cython.bint)
    cpdef tuple _batch_arrays(self, list scheduled, _DecodePrefix pre, object pre_ctx, list ctx, list lefts,
                              Py_ssize_t lead)

    @cython.locals(pre=_DecodePrefix, m=cython.Py_ssize_t, reqs=list, vr=VReq, ok=cython.bint, free=cython.longlong)
    cpdef tuple _fast_decodes(self, long long budget, long long dt)

    cpdef _drop_lazy(self)
    cpdef list _finished_in_prefix(self, _DecodePrefix pre, long long k)

    @cython.locals(pre=_DecodePrefix, running=list, m=cython.Py_ssize_t, j=cython.Py_ssize_t, vr=VReq)
    cpdef _next_prefix(self, _VBatch batch, long long k)

    @cython.locals(waiting=object, vr=VReq, hit=cython.longlong, hh=cython.longlong, n=cython.longlong,
                   cached=cython.longlong)
    cpdef long long _admit(self, double now, long long budget, list scheduled)

    @cython.locals(batch=_VBatch, pre=_DecodePrefix, m=cython.Py_ssize_t, emitted=list, spec=list, vr=VReq)
    cpdef complete(self, object plan, double end)

    @cython.locals(batch=_VBatch, reqs=list, k=cython.longlong, pre=_DecodePrefix, m=cython.Py_ssize_t,
                   c0=object, c0_list=list, vr=VReq)
    cpdef complete_stretch(self, object plan, object ends)

    cpdef bint _bulk_replay(self)
    cpdef _replay(self, list reqs, object c0, long long first, long long k)

    @cython.locals(done=list, vr=VReq)
    cpdef _finish_done(self, list reqs, double end)

    @cython.locals(batch=_VBatch, n=cython.Py_ssize_t, bs=cython.longlong, limit=cython.longlong)
    cpdef long long decode_stretch_limit(self)
