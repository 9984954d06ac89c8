"""Op-level cost model: one kernel's time from its shape, the GPU's spec and AnalyticParams.

Every function takes numpy arrays (or scalars) of shapes and returns seconds, so the same
formulas price one op inside a pass (:mod:`servesim.perf.analytic`) and a table of
thousands of measured kernels (``benchmarks/bench_kernels.py``).  Shapes are per GPU
(heads already divided by tensor parallelism).
"""

from __future__ import annotations

import numpy as np

from servesim.hardware.gpu import GPUSpec
from servesim.perf.precision import compute_precision, weight_bytes


class OpModel:
    """Per-op roofline costs on one GPU with one parameter set."""

    def __init__(self, gpu: GPUSpec, params) -> None:
        self.gpu, self.p = gpu, params
        self.bw = gpu.memory_bandwidth_gbs * 1e9
        self.bw_eff = self.bw * params.mem_eff
        self.peak_attn = gpu.peak_flops("bf16")

    # ------------------------------------------------------------------ GEMM
    def gemm(self, m, n, k, dtype: str = "bf16"):
        """``[m, k] × [k, n]`` with ``dtype`` weights (activations bf16 or the format's own)."""
        p = self.p
        m = np.asarray(m, dtype=np.float64)
        peak = self.gpu.peak_flops(compute_precision(dtype, self.gpu))
        eff = p.gemm_eff_max * m / (m + p.gemm_half_tokens)
        comp = 2.0 * m * n * k / (peak * eff)
        mem = (np.asarray(n, float) * k * weight_bytes(dtype) + m * (np.asarray(k, float) + n) * 2.0) / self.bw_eff
        return np.maximum(comp, mem)

    # ------------------------------------------------------------- attention
    def attention_prefill(self, batch, new, cached, heads, kv_heads, head_dim, window=0, kv_bytes=2.0):
        """Causal (flash) attention of ``batch`` chunks of ``new`` tokens over ``cached`` prefix."""
        p = self.p
        b = np.asarray(batch, float)
        n = np.asarray(new, float)
        c = np.asarray(cached, float)
        w = np.asarray(window, float)
        pairs = _causal_pairs(n, c, w)
        read = np.where(w > 0, np.minimum(n + c, np.where(w > 0, w, 1.0)), n + c)
        eff = p.attn_prefill_eff_max * n / (n + p.attn_prefill_half_tokens)
        comp = b * pairs * 4.0 * heads * head_dim / (self.peak_attn * eff)
        mem = b * read * 2.0 * kv_heads * head_dim * kv_bytes / self.bw_eff
        return np.maximum(comp, mem)

    def attention_decode(self, batch, ctx, heads, kv_heads, head_dim, window=0, kv_bytes=2.0):
        """One query token per request over ``ctx`` cached tokens (GQA, paged KV)."""
        p = self.p
        b = np.asarray(batch, float)
        s = np.asarray(ctx, float)
        w = np.asarray(window, float)
        s = np.where(w > 0, np.minimum(s, np.where(w > 0, w, 1.0)), s) + p.attn_decode_ctx_overhead_tokens
        comp = b * s * 4.0 * heads * head_dim / (self.peak_attn * p.attn_decode_compute_eff)
        mem = b * s * 2.0 * kv_heads * head_dim * kv_bytes / (self.bw * p.attn_decode_mem_eff)
        return np.maximum(comp, mem)

    def mla_prefill(self, batch, new, cached, heads, qk_nope=128, qk_rope=64, v_dim=128, kv_lora=512,
                    kv_bytes=2.0):
        """MLA prefill (non-absorbed: per-head q·k over nope+rope dims, then ·v)."""
        p = self.p
        b = np.asarray(batch, float)
        n = np.asarray(new, float)
        c = np.asarray(cached, float)
        pairs = _causal_pairs(n, c, np.zeros_like(n))
        eff = p.attn_prefill_eff_max * n / (n + p.attn_prefill_half_tokens)
        comp = b * pairs * 2.0 * heads * (qk_nope + qk_rope + v_dim) / (self.peak_attn * eff)
        mem = b * (n + c) * (kv_lora + qk_rope) * kv_bytes / self.bw_eff
        return np.maximum(comp, mem)

    def mla_decode(self, batch, ctx, heads, qk_rope=64, kv_lora=512, kv_bytes=2.0):
        """Absorbed MLA decode: every head attends over the shared latent (+ rope key)."""
        p = self.p
        b = np.asarray(batch, float)
        s = np.asarray(ctx, float) + p.attn_decode_ctx_overhead_tokens
        comp = b * s * 2.0 * heads * (2 * kv_lora + qk_rope) / (self.peak_attn * p.attn_decode_compute_eff)
        mem = b * s * (kv_lora + qk_rope) * kv_bytes / (self.bw * p.attn_decode_mem_eff)
        return np.maximum(comp, mem)

    # ------------------------------------------------------------------- MoE
    def moe(self, tokens, hidden, inter, topk, experts, moe_tp=1, ep=1, dtype: str = "bf16"):
        """Routed experts (gate/up + down grouped GEMMs) for ``tokens`` tokens on one GPU."""
        p = self.p
        t = np.asarray(tokens, float)
        E = np.asarray(experts, float)
        k = np.asarray(topk, float)
        local = E / ep
        frac = -np.expm1(t * np.log1p(-k / E))
        touched = local * frac
        per_expert_params = 3.0 * hidden * inter / moe_tp
        assign = t * k / ep
        per_expert = t * k / (E * frac)
        eff = p.moe_eff_scale * p.gemm_eff_max * per_expert / (per_expert + p.moe_half_tokens)
        peak = self.gpu.peak_flops(compute_precision(dtype, self.gpu))
        comp = assign * 2.0 * per_expert_params / (peak * eff)
        mem = (touched * per_expert_params * weight_bytes(dtype)
               + assign * (2.0 * hidden + 3.0 * inter / moe_tp) * 2.0) / self.bw_eff
        return np.maximum(comp, mem)

    # ------------------------------------------------------------ collectives
    def _link(self, ranks):
        up = self.gpu.scale_up
        ranks = np.asarray(ranks, float)
        inside = ranks <= up.domain_size
        bw = np.where(inside, up.bandwidth_gbs, self.gpu.scale_out.bandwidth_gbs) * 1e9
        lat = np.where(inside, up.latency_us, self.gpu.scale_out.latency_us) * 1e-6
        return ranks, bw * self.p.comm_eff / self.p.comm_time_scale, \
            self.p.link_latency_factor * lat * self.p.comm_time_scale

    def all_reduce(self, nbytes, ranks):
        """All-reduce of ``nbytes`` over ``ranks`` GPUs (ring-equivalent volume)."""
        r, link, lat = self._link(ranks)
        fixed = self.p.allreduce_fixed_s * self.p.comm_time_scale + lat * np.log2(r)
        return fixed + 2.0 * (r - 1) / r * np.asarray(nbytes, float) / link

    def all_gather(self, nbytes, ranks):
        """All-gather (or reduce-scatter) whose full result is ``nbytes``."""
        r, link, lat = self._link(ranks)
        fixed = self.p.allreduce_fixed_s * self.p.comm_time_scale + lat * np.log2(r)
        return fixed + (r - 1) / r * np.asarray(nbytes, float) / link

    def all_to_all(self, nbytes, ranks):
        """All-to-all where each GPU holds ``nbytes`` and keeps 1/ranks of it."""
        r, link, lat = self._link(ranks)
        fixed = self.p.alltoall_fixed_s * self.p.comm_time_scale + lat * np.log2(r)
        return fixed + (r - 1) / r * np.asarray(nbytes, float) / link

    # ------------------------------------------------------ linear attention
    def gated_delta(self, requests, tokens, v_heads, head_k=128, head_v=128):
        """Gated-DeltaNet recurrent update: per-token state FLOPs, state read+write per request."""
        p = self.p
        comp = np.asarray(tokens, float) * p.linear_attn_flops_factor * v_heads * head_k * head_v \
            / (self.peak_attn * p.gemm_eff_max)
        mem = np.asarray(requests, float) * 2.0 * v_heads * head_k * head_v * p.state_dtype_bytes / self.bw_eff
        return np.maximum(comp, mem)


def _causal_pairs(n, c, w):
    """(query, key) pairs of a causal chunk of ``n`` tokens after ``c`` cached ones, each query
    seeing at most ``w`` keys when ``w > 0``."""
    full = n * c + 0.5 * n * (n + 1)
    a = c + 1.0
    b = c + n
    W = np.where(w > 0, w, 1.0)
    m = np.minimum(b, W)
    inside = np.where(a <= W, 0.5 * (a + m) * (m - a + 1), 0.0)
    capped = inside + (b - np.maximum(m, a - 1)) * W
    return np.where(w > 0, capped, full)
