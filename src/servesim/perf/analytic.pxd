# Types for compiling analytic.py with Cython (setup.py FROM_SOURCE; see kvcache/radix_cache.pxd).
# The model's coefficients stay Python objects; what compiling buys is direct attribute access
# and C calls between the pricing methods.  The GEMM and prefill-attention pricing run on C
# doubles and integers: Python floats are IEEE doubles, the operations keep their order, and
# the build forbids fused multiply-adds, so the results are Python's bit for bit
# (tests/test_compiled_equivalence.py; benchmarks/check_identical.py).
cimport cython
from servesim.perf.plan cimport PassPlan


cdef class AnalyticStepTime:
    cdef public object model
    cdef public object gpu
    cdef public object layout
    cdef public object weight_dtype
    cdef public object kv_dtype
    cdef public object p
    cdef public bint eager_launch
    cdef public bint moe_all_to_all
    cdef public object moe_kernel
    cdef public object kernel_rates
    cdef public double _gemm_eff_max, _gemm_half, _pre_eff_max, _pre_half
    cdef public dict _cache
    cdef public dict _rank_cache
    cdef public object _bw_eff
    cdef public object _attn_gemms
    cdef public object _mlp_gemms
    cdef public object _moe_log_miss
    cdef public object _moe
    cdef public object _elem_s
    cdef public object _lm
    cdef public object _cap
    cdef public bint _cap_window
    cdef public object _pre_full
    cdef public object _pre_cap
    cdef public double _pre_tok, _pre_cap_causal
    cdef public object _dec_full
    cdef public object _dec_cap
    cdef public object _dec_ramp
    cdef public double _cta_pairs, _cta_pairs_cap
    cdef public object _dec_oh
    cdef public object _dp
    cdef public bint _compiled_stretch
    cdef public object _lin_flop_s
    cdef public object _lin_state_s
    cdef public object _lin_prefill_fixed
    cdef public object _lin_pre_flop_s, _lin_chain_s
    cdef public long long _lin_heads
    cdef public object _ops
    cdef public object _elem_fixed, _attn_fixed, _attn_dec_fixed, _heads
    cdef public long long _pack
    cdef public long long _sms
    cdef public object _ar_tp, _qk_ar
    cdef public dict _ar_memo
    cdef public object _a2a
    cdef public object _gather_layers
    cdef public dict _gather_memo
    cdef public object _L
    cdef public object _graph_oh, _eager_oh, _graph_max_batch, _request_oh

    cpdef double _gemms_time(self, gemms, double tokens) except? -1.0
    cpdef double _ar_time(self, double tokens) except? -1.0
    cpdef _moe_time(self, t_total)
    cpdef _gather_time(self, tokens)
    cpdef _pass_overhead(self, decode_only, decode_batch)
    cpdef _token_part(self, t_total, n_chunks, n_dec, dtok, decode_only)
    cpdef _decode_attn(self, n, s_full, s_cap, dtok=*, ranks=*)
    @cython.locals(tot_new=cython.longlong, pairs=cython.double, read=cython.longlong, W=cython.longlong,
                   pairs_cap=cython.double, read_cap=cython.longlong, n=cython.longlong, c=cython.longlong,
                   a=cython.longlong, b=cython.longlong, m=cython.longlong, inside=cython.double,
                   x=cython.double, eff=cython.double, c_full=cython.double, m_full=cython.double,
                   t=cython.double, c_cap=cython.double, m_cap=cython.double, i=cython.Py_ssize_t,
                   blk=cython.longlong, extra=cython.double, ctas=cython.longlong, nq=cython.longlong,
                   q=cython.longlong, waves_ctas=cython.longlong, gp=cython.longlong, nqp=cython.longlong,
                   ctas_full=cython.longlong, eff_full=cython.double)
    cpdef _prefill_attn(self, list new, list cached)
    @cython.locals(n=cython.longlong, waves=cython.longlong)
    cpdef _lin_prefill(self, list new)
    @cython.locals(n_dec=cython.Py_ssize_t, n_chunks=cython.Py_ssize_t)
    cpdef pass_time(self, PassPlan plan)
    cpdef tuple _ctx_sums(self, object ctx)
    cpdef decode_stretch_ends(self, decode_ctx, steps, now, extra=*, overlapped=*)
    cpdef tuple _stretch_kernel_args(self, decode_ctx, steps, base)
    cpdef decode_stretch_times(self, decode_ctx, steps)
