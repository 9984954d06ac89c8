# Types for compiling scheduler.py with Cython (setup.py FROM_SOURCE; see kvcache/radix_cache.pxd).
# The request state and the decode fast path this engine extends are fast_path.pxd's.
cimport cython
from servesim.workload.request cimport Request
from servesim.engines.vllm.fast_path cimport VReq, _DecodePrefix, _VBatch, VLLMDecodeFastPath
from servesim.perf.plan cimport PassPlan


cdef class VLLMEngine(VLLMDecodeFastPath):
    cdef public object opt
    cdef public long long max_model_len
    cdef public long long max_len
    cdef public bint chunked_prefill
    cdef public object threshold
    cdef public long long _loading
    cdef public object _shared
    cdef public bint async_lag
    cdef public double _decided_at
    cdef public double _last_end
    cdef public double _cutoff

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
    cpdef object _schedule(self, double now)
    @cython.locals(plan=object)
    cpdef object schedule(self, double now)

    @cython.locals(waiting=object, vr=VReq, hit=cython.longlong, hh=cython.longlong, n=cython.longlong,
                   cached=cython.longlong)
    cpdef long long _admit(self, double now, long long budget, list scheduled)

    @cython.locals(batch=_VBatch, pre=_DecodePrefix, m=cython.Py_ssize_t, emitted=list, spec=list, vr=VReq)
    cpdef complete(self, object plan, double end)
    @cython.locals(k=cython.Py_ssize_t)
    cpdef complete_stretch(self, object plan, object ends)
    cpdef bint _unseen_waiting(self)
    cpdef long long decode_stretch_limit(self)
    cpdef tuple decode_stretch_plan(self)

    @cython.locals(done=list, vr=VReq)
    cpdef _finish_done(self, list reqs, double end)

    @cython.locals(total=cython.longlong, vr=VReq, running=list, j=cython.Py_ssize_t)
    cpdef long long _outstanding(self, Py_ssize_t m)
