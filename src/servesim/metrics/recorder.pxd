# Types for compiling recorder.py with Cython (setup.py FROM_SOURCE; see kvcache/radix_cache.pxd).
cdef class RequestRecorder:
    cdef public long long size
    cdef public dict cols
    cdef public object request_id
    cdef public object session_id
    cdef public object reason
    cdef public dict extra_columns
    cdef public bint spilled
    cdef public object _itl
    cdef public object _itl_warmup
    cdef public list _gv
    cdef public list _gw
    cdef public list _wv
    cdef public list _ww
    cdef public object _warm
    cdef public bint _any_warm
    cdef public object _c_first
    cdef public object _c_second
    cdef public object _c_last
    cdef public object _c_em
    cdef public object _c_gen
    cdef public long long _capacity
    cdef public object _kernel
    cdef public object _emitter
    cdef public long long _flush_at
    cdef double[::1] _arrival_v, _first_scheduled_v, _finish_v
    cdef long long[::1] _worker_v, _cached_v, _host_cached_v, _status_v, _retractions_v
    cdef long long[::1] _in_v, _out_v, _turn_v

    cpdef register(self, long long index, object request_id, object session_id, object turn,
                   object input_length, object output_length, object warmup)
    cpdef arrived(self, long long index, object t)
    cpdef assigned(self, long long index, object worker)
    cpdef scheduled(self, long long index, object t, object cached_tokens, object host_cached_tokens=*)
    cpdef retracted(self, long long index)
    cpdef _flush(self)
    cpdef emit(self, object idx, object t, object tokens_each=*)
    cpdef _flush_if_full(self)
    cpdef emit_stretch(self, object idx, object pass_ends)
    cpdef finished(self, long long index, object t, object status, object reason=*)
