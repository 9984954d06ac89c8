# Types for compiling scheduler.py with Cython (setup.py FROM_SOURCE; see kvcache/radix_cache.pxd).
# The request state, the pass records and the decode path this engine extends are fast_path.pxd's.
cimport cython
from servesim.workload.request cimport Request
from servesim.engines.sglang.fast_path cimport SGReq, _PrefillBatch, _DecodeBatch, SGLangDecodeFastPath
from servesim.engines.sglang.overlap cimport OverlapLag


cdef class SGLangEngine(SGLangDecodeFastPath):
    cdef public long long capacity
    cdef public object hostlink
    cdef public object host
    cdef public long long host_loaded_tokens
    cdef public object chunk_size
    cdef public long long max_req_len
    cdef public long long max_req_input_len
    cdef public long long max_running
    cdef public double init_ratio
    cdef public long long retractions
    cdef public list prefilling
    cdef public list inbox_at
    cdef public list ready_at
    cdef public double _cutoff
    cdef public object _last_decoded

    @cython.locals(max_new=cython.longlong, sr=SGReq)
    cpdef add_request(self, Request req, double now, long long kv_ready=*)

    cpdef _poll(self, double now)
    cpdef _pull_all(self, double now)

    @cython.locals(at=list, n=cython.Py_ssize_t)
    cpdef _take_inbox(self, double cutoff)

    cpdef bint _has_pulled_work(self)
    cpdef bint has_work(self)

    @cython.locals(plan=object, lag=OverlapLag)
    cpdef object schedule(self, double now)

    @cython.locals(batch=object)
    cpdef object _next_pass(self, double now)

    cpdef tuple _match(self, SGReq sr)

    @cython.locals(allocatable=cython.longlong, total_offset=cython.double, cur_offset=cython.longlong,
                   rem_input=cython.longlong, rem_chunk=cython.double, can_run=list, new_chunked=SGReq,
                   sr=SGReq, left=cython.longlong, take=cython.longlong, stop=cython.bint,
                   consumed=cython.longlong, matched=cython.longlong, extend=cython.longlong,
                   hh=cython.longlong, total_tokens=cython.longlong, input_tokens=cython.longlong,
                   trunc=cython.longlong)
    cpdef object _new_prefill_batch(self)

    cpdef double _budget(self, double reserved)

    cpdef _take_prefix(self, SGReq sr, long long matched, object node, long long host_hit=*)

    @cython.locals(sr=SGReq, i=cython.Py_ssize_t, loaded=cython.longlong, ok=cython.bint)
    cpdef object _prefill_plan(self, _PrefillBatch batch, double now)

    cpdef complete(self, object plan, double end)

    @cython.locals(sr=SGReq, emitted=list)
    cpdef _complete_prefill(self, _PrefillBatch batch, double end)

    @cython.locals(sr=SGReq, total=cython.longlong)
    cpdef long long _queued_outstanding(self) except? -1
