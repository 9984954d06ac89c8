# Types for compiling fast_path.py with Cython (setup.py FROM_SOURCE; see kvcache/radix_cache.pxd).
# scheduler.pxd cimports these types: the reference scheduler extends SGLangDecodeFastPath and
# calls its methods as C methods.  (The decode plan's call of the scheduler's _retract, rare,
# stays a Python call: _retract holds closures, which cpdef methods cannot.)
cimport cython
from servesim.workload.request cimport Request
from servesim.engines.base cimport Engine
from servesim.kvcache.radix_cache cimport RadixCache
from servesim.kvcache.token_pool cimport TokenPool
from servesim.engines.sglang.overlap cimport OverlapLag


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


cdef class SGLangDecodeFastPath(Engine):
    # The reference scheduler's state (set by SGLangEngine.__init__), read here.
    cdef public object opt
    cdef public long long page
    cdef public RadixCache tree
    cdef public TokenPool pool
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
    cdef public list ready
    cdef public object recv
    cdef public list inbox
    cdef public OverlapLag lag

    cpdef long long _ceil_page(self, long long n)
    cpdef long long _floor_page(self, long long n)

    @cython.locals(need=cython.longlong)
    cpdef bint _grow(self, SGReq sr, long long new_computed)

    @cython.locals(left=cython.longlong)
    cpdef _run_append(self, SGReq sr)

    cpdef _run_left_min(self)

    @cython.locals(need=cython.longlong, n=cython.longlong, grown=cython.bint)
    cpdef object _decode_plan(self)

    cpdef long long _decode_need_run(self)

    cpdef _complete_decode(self, long long n, double end)

    @cython.locals(sr=SGReq)
    cpdef _finish_done(self, double end)

    cpdef _end(self, SGReq sr, double end)

    @cython.locals(k=cython.longlong, end=cython.double, extra=cython.longlong, grown=cython.bint)
    cpdef complete_stretch(self, object plan, object ends)

    @cython.locals(tree=RadixCache, fit=cython.longlong, grown=cython.bint)
    cpdef _alloc_evicting(self, long long n, long long passes)

    @cython.locals(tree=RadixCache)
    cpdef bint _evictions_fold(self)

    @cython.locals(k=cython.longlong, n=cython.longlong, kv=cython.longlong, room=cython.longlong,
                   free=cython.longlong)
    cpdef long long decode_stretch_limit(self)

    cpdef long long input_lag_passes(self)

    @cython.locals(aligned=cython.longlong, present=cython.longlong, dup=cython.longlong)
    cpdef tuple _insert_computed(self, SGReq sr, bint match=*)

    @cython.locals(aligned=cython.longlong)
    cpdef _cache_unfinished(self, SGReq sr)

    cpdef _release(self, SGReq sr, bint insert)
