# Types for compiling sglang.py with Cython (setup.py FROM_SOURCE; see kvcache/radix_cache.pxd).
cimport cython
from servesim.workload.request cimport Request
from servesim.engines.base cimport Engine
from servesim.kvcache.radix_cache cimport RadixCache
from servesim.kvcache.token_pool cimport TokenPool


cdef class SGReq:
    cdef public Request req
    cdef public long long max_new
    cdef public long long generated
    cdef public long long computed
    cdef public long long prefix
    cdef public object node
    cdef public long long alloc
    cdef public long long fill
    cdef public long long extend
    cdef public long long host_hit
    cdef public bint admitted_once


cdef class _PrefillBatch:
    cdef public list reqs
    cdef public SGReq chunked


cdef class _DecodeBatch:
    cdef public long long n


cdef class SGLangEngine(Engine):
    cdef public object opt
    cdef public long long page
    cdef public long long capacity
    cdef public RadixCache tree
    cdef public TokenPool pool
    cdef public object hostlink
    cdef public object host
    cdef public long long host_loaded_tokens
    cdef public object chunk_size
    cdef public long long max_req_len
    cdef public long long max_req_input_len
    cdef public long long max_running
    cdef public double init_ratio
    cdef public double min_ratio
    cdef public double ratio_decay
    cdef public double new_token_ratio
    cdef public list waiting
    cdef public object batch
    cdef public list running
    cdef public long long _left_min
    cdef public object _decode_in_flight
    cdef public SGReq chunked
    cdef public bint batch_is_full
    cdef public long long retractions
    cdef public list prefilling
    cdef public list ready
    cdef public object recv
    cdef public list inbox
    cdef public list inbox_at
    cdef public list ready_at
    cdef public double _cutoff
    cdef public object lag
    cdef public object _last_decoded

    cpdef long long _ceil_page(self, long long n)
    cpdef long long _floor_page(self, long long n)

    @cython.locals(need=cython.longlong)
    cpdef bint _grow(self, SGReq sr, long long new_computed)

    @cython.locals(left=cython.longlong)
    cpdef _run_append(self, SGReq sr)

    cpdef _run_left_min(self)

    @cython.locals(max_new=cython.longlong, sr=SGReq)
    cpdef add_request(self, Request req, double now, long long kv_ready=*)

    cpdef _poll(self, double now)
    cpdef _pull_all(self, double now)

    @cython.locals(at=list, n=cython.Py_ssize_t)
    cpdef _take_inbox(self, double cutoff)

    cpdef bint _has_pulled_work(self)
    cpdef bint has_work(self)

    @cython.locals(plan=object)
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

    @cython.locals(need=cython.longlong, n=cython.longlong, grown=cython.bint)
    cpdef object _decode_plan(self)

    cpdef long long _decode_need_run(self)

    cpdef complete(self, object plan, double end)

    @cython.locals(k=cython.longlong, end=cython.double, extra=cython.longlong, grown=cython.bint)
    cpdef complete_stretch(self, object plan, object ends)

    @cython.locals(tree=RadixCache, fit=cython.longlong, grown=cython.bint)
    cpdef _alloc_evicting(self, long long n, long long passes)

    @cython.locals(tree=RadixCache)
    cpdef bint _evictions_fold(self)

    @cython.locals(sr=SGReq, emitted=list)
    cpdef _complete_prefill(self, _PrefillBatch batch, double end)

    cpdef _complete_decode(self, long long n, double end)

    @cython.locals(sr=SGReq)
    cpdef _finish_done(self, double end)

    cpdef _end(self, SGReq sr, double end)

    @cython.locals(aligned=cython.longlong, present=cython.longlong, dup=cython.longlong)
    cpdef tuple _insert_computed(self, SGReq sr, bint match=*)

    @cython.locals(aligned=cython.longlong)
    cpdef _cache_unfinished(self, SGReq sr)

    cpdef _release(self, SGReq sr, bint insert)

    @cython.locals(k=cython.longlong, n=cython.longlong, kv=cython.longlong, room=cython.longlong,
                   free=cython.longlong)
    cpdef long long decode_stretch_limit(self)

    cpdef long long input_lag_passes(self)

    @cython.locals(sr=SGReq, total=cython.longlong)
    cpdef long long _queued_outstanding(self) except? -1
