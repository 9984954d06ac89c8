# Types for compiling fast_path.py with Cython (setup.py FROM_SOURCE; see kvcache/radix_cache.pxd).
# scheduler.pxd cimports these types: the reference scheduler extends VLLMDecodeFastPath and
# calls its methods, and it calls the scheduler's _allocate and _finish_done, as C methods.
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
    cdef public double arrived


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

    @cython.locals(vr=VReq, left=list)
    cpdef _DecodePrefix extended(self, list more, object arith)


cdef class _VBatch:
    cdef public list reqs
    cdef public bint decode_only
    cdef public bint preempted
    cdef public object idx
    cdef public object computed
    cdef public long long left_min
    cdef public _DecodePrefix prefix


cdef class VLLMDecodeFastPath(BlockKVEngine):
    # The reference scheduler's queues and limits (set by VLLMEngine.__init__), read here.
    cdef public long long budget
    cdef public long long max_seqs
    cdef public object waiting
    cdef public list running
    cdef public object ready
    # The fast path's own state.
    cdef public _VBatch _last
    cdef public _DecodePrefix _prefix
    cdef public _DecodePrefix _lazy
    cdef public bint _in_flight
    cdef public long long fast_decodes_min

    # The reference scheduler's (VLLMEngine overrides them).
    cpdef bint _allocate(self, VReq vr, long long n)
    cpdef _finish_done(self, list reqs, double end)

    @cython.locals(m=cython.Py_ssize_t, reuse=cython.bint, vr=VReq)
    cpdef tuple _batch_arrays(self, list scheduled, _DecodePrefix pre, object pre_ctx, list ctx, list lefts,
                              Py_ssize_t lead)

    @cython.locals(pre=_DecodePrefix, m=cython.Py_ssize_t, reqs=list, vr=VReq, ok=cython.bint, free=cython.longlong)
    cpdef tuple _fast_decodes(self, long long budget, long long dt)

    cpdef _drop_lazy(self)
    cpdef list _finished_in_prefix(self, _DecodePrefix pre, long long k)

    @cython.locals(pre=_DecodePrefix, running=list, m=cython.Py_ssize_t, j=cython.Py_ssize_t, vr=VReq)
    cpdef _next_prefix(self, _VBatch batch, long long k)

    @cython.locals(batch=_VBatch, reqs=list, k=cython.longlong, pre=_DecodePrefix, m=cython.Py_ssize_t,
                   c0=object, c0_list=list, vr=VReq)
    cpdef complete_stretch(self, object plan, object ends)

    cpdef bint _bulk_replay(self)
    cpdef _replay(self, list reqs, object c0, long long first, long long k)

    @cython.locals(batch=_VBatch, n=cython.Py_ssize_t, bs=cython.longlong, limit=cython.longlong)
    cpdef long long decode_stretch_limit(self)

    @cython.locals(batch=_VBatch, n=cython.Py_ssize_t, lm=cython.longlong, bs=cython.longlong, limit=cython.longlong,
                   top=cython.longlong, p=cython.longlong, e=cython.longlong, x=cython.longlong, event=bytearray,
                   starts=bytearray)
    cpdef tuple decode_stretch_plan(self)

    @cython.locals(first=cython.longlong, bs=cython.longlong, head=VReq, hit=cython.longlong, computed=list,
                   opens=cython.longlong, x=cython.longlong, cuts=list, cap=cython.longlong, us=cython.longlong,
                   free=cython.longlong, room=cython.longlong, per=list, best=cython.longlong, taken=cython.longlong,
                   k=cython.Py_ssize_t, h=cython.longlong, hfree=cython.longlong, s=cython.longlong,
                   o=cython.longlong, positions=set)
    cpdef long long _blocked_head_passes(self, object c, long long limit)

    @cython.locals(bs=cython.longlong, n=cython.longlong, need=cython.longlong)
    cpdef bint _head_fits(self, VReq head, long long hit, long long hit_free, long long free, long long room)

    @cython.locals(bs=cython.longlong, reqs=list, best=cython.longlong, j=cython.Py_ssize_t, vr=VReq,
                   x=cython.longlong, s=cython.longlong, us=cython.longlong, i=cython.longlong)
    cpdef long long _first_fill_under(self, list computed, long long limit, set hashes)
