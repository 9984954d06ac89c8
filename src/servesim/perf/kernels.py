"""Op-level cost model: one kernel's time from its shape, the GPU's spec and AnalyticParams.

Every method takes numpy arrays (or scalars) of shapes and returns seconds, so the same
formulas price one op inside a pass (:mod:`servesim.perf.analytic`) and thousands of
measured kernels (``benchmarks/bench_kernels.py``, docs/physics.md).  Shapes are per GPU
(heads already divided by tensor parallelism).  Each op costs::

    t = kernels × t_kernel + max(compute, memory)

- ``t_kernel``: the GPU's shortest kernel (``GPUSpec.kernel_latency_us``, measured), paid
  once per kernel the op launches;
- compute: the FLOPs the hardware actually executes — a GEMM's output padded to whole
  tiles, the tiles run in whole waves over the GPU's SMs (``GPUSpec.sm_count``); flash
  attention's query blocks the same way — at the precision's peak times an efficiency that
  never exceeds the GPU's measured ceiling (``GPUSpec.achievable``);
- memory: bytes moved over HBM at ``mem_eff`` of the bandwidth (capped the same way); a
  streaming kernel (a GEMM's weights, decode attention's KV) also pays its ramp and tail
  (``GPUSpec.stream_ramp_us``, :meth:`OpModel._ramped`).

Nothing here is fitted per deployment: the constants are the GPU's facts and the
:class:`~servesim.perf.analytic_params.AnalyticParams` defaults, which docs/physics.md checks
against the measured kernel tables.
"""

from __future__ import annotations

import math

import numpy as np

from servesim.hardware.gpu import NCCL_OPS, GPUSpec
from servesim.perf.attention_blocks import (ATTN_BLOCK, _causal_pairs, packed_window_key_blocks, prefill_exposed_bytes,
                                             window_key_blocks)
from servesim.perf.collective_laws import collective_steps, collective_volume
from servesim.perf.engine_kernels import FUSED_QUANT_PRECISIONS, NO_RATES, KernelRates
from servesim.perf.moe_row_blocks import marlin_row_block, ogs_row_block
from servesim.perf.precision import compute_precision, weight_bytes

#: GEMM output tiles (rows, cols) the kernel libraries choose among (CUTLASS / cuBLAS
#: Hopper and Blackwell mainloops: 64- or 128-row warpgroup tiles, 64-256 columns).
GEMM_TILES = ((64, 64), (64, 128), (128, 128), (128, 256))
#: split-K factors tried when the output has fewer tiles than SMs (cuBLAS split-K / stream-K).
SPLIT_K = (1, 2, 4, 8)
#: the fp8 / fp4 tensor-core GEMMs the engines run (CUTLASS scaled-mm in SGLang and vLLM, DeepGEMM
#: and CUTLASS block-scaled fp8, FlashInfer / TensorRT-LLM nvfp4) give each output tile its whole K
#: loop on one SM: no split-K.  Measured (aiconfigurator-core gemm_perf tables): with few output
#: tiles their time grows with K alone — block-fp8 ``m=8, n=128`` on H100 (TensorRT-LLM): 9, 13,
#: 22, 75 us at K = 4k, 8k, 16k, 64k, one tile's 512 k-blocks in a row — where cuBLAS's bf16
#: kernel, moving twice the bytes, takes 12 us at K = 64k; nvfp4 on B200 shows the same.  AMD
#: GPUs, with no kernel tables, take the same rule unmeasured.
QUANTIZED_SPLIT_K = (1,)
#: output tiles of the weight-only (mixed-input) GEMMs: bf16 activations times int4 / int8 weights
#: dequantized in registers (TensorRT-LLM's fpA_intB CUTLASS kernels, Marlin).  Built for small
#: batches, they also run 16- and 32-row thread-block tiles (TensorRT-LLM's tile configs for these
#: kernels start at 16×128, one ``mma.m16n8k16`` row block), so a decode-sized ``m`` pads to 16
#: rows, not 64.  Priced with 64-row tiles, TensorRT-LLM's A100 int4 table was 50-90% too slow at
#: ``m ≤ 16`` with large weights (the padded tile's math, not the 4-bit weight stream, bound it).
WEIGHT_ONLY_TILES = ((16, 128), (32, 128), (64, 128), (128, 128))
#: kernels an op runs besides the quantization kernel and the GEMM when it derives a per-tensor
#: activation scale at run time (no calibrated ``input_scale``): TensorRT-LLM's dynamic per-tensor
#: fp8 quantization clears the scale (a memset), reduces the tensor's absolute maximum (one pass
#: over the bf16 activations) before quantizing, and its linear layer casts the bf16 scale to fp32.
#: Measured: TensorRT-LLM's fp8 table (its collector loads no ``input_scale``) has a 12 us floor on
#: every GPU where SGLang's per-token fp8 op takes 4.4-5 us, and keeps ~7 us over it up to
#: mid-sized shapes.
DYNAMIC_SCALE_KERNELS = 3
#: a tile's operand reuse: FLOPs per byte loaded into shared memory is ``2·tm·tn/(tm+tn)/2``;
#: efficiency follows ``I / (I + TILE_INTENSITY_HALF)`` normalised to the largest tile
#: (smaller tiles reach less of the peak: 64×64 about 80% of 128×256).
TILE_INTENSITY_HALF = 16.0
#: a flash-attention thread block's own fixed work, in key blocks of a
#: :data:`ATTN_CTA_HEAD_DIM`-wide head: loading its query block, filling the load pipeline, the
#: final softmax rescale and writing the output.  A fixed time per thread block, whatever its
#: head size: a 64-wide head's key block is half the math of a 128-wide one's, its thread
#: block's pipeline fill and rescale are not (as key blocks of its own width: GQA prefill
#: 26.5% → 23.5% median error on the tables, with a sliding window 43.7% → 37.3%; the tables'
#: 64-wide heads −30% → −11% bias).  MLA's prefill keeps it in its own key blocks.
ATTN_CTA_OVERHEAD_BLOCKS = 2.0
ATTN_CTA_HEAD_DIM = 128.0
#: the SM rate the fixed work above is counted at: H100 SXM's attention peak per SM (860.8
#: TFLOP/s bf16 at its measured ceiling over 132 SMs).  The fixed work is a time (its loads'
#: and pipeline's latencies), not math: on a GPU whose SMs compute faster it is more key blocks
#: (:attr:`OpModel.cta_blocks`: 3.6 on B200, 4.0 on GB300; 0.8 on A100, 0.6 on L40S).  Counted
#: as 2 key blocks on every GPU, the engines' Blackwell prefill rates came out at 0.45-0.85 of the
#: op model's math (SGLang MLA 28.5% median error, TensorRT-LLM MLA 27.8%, GQA 22.9%) — short
#: chunks too fast, long ones too slow; at the same time per SM they are 0.73-1.08 or none
#: (20.7%, 21.0%, 17.9%).
ATTN_CTA_REF_SM_FLOPS = 860.778e12 / 132
#: query heads an absorbed-MLA decode kernel runs together (FlashMLA and trtllm-gen's MLA kernels:
#: a 64-row tile of heads per request); fewer heads pad the tile.
MLA_HEAD_BLOCK = 64.0
#: fixed cost of one attention op, in kernel latencies: the op as the serving frameworks
#: run it (rotary embedding, KV-cache write, scheduling metadata, the attention kernel, the
#: split-KV combine).  Measured: the smallest attention ops of the kernel tables take 11-14 us
#: on H100 (kernel latency 2.5 us) and 8-11 us on B200 (1.8 us).
ATTN_KERNELS = 5
#: kernels of the small per-layer ops under CUDA graphs or torch.compile fusion: the two
#: (fused add +) RMSNorms and the gated activation.
ELEMENTWISE_KERNELS = 3
#: kernels of a linear-attention (gated DeltaNet) layer's own op: the chunked prefill form runs
#: about eight (cumulative gates, chunk K·Kᵀ, triangular solve, WY transform, chunk states,
#: output; the tables' smallest chunked op takes 23 us on H100), the fused recurrent decode
#: update two (with the short convolution).
LINEAR_ATTN_KERNELS = 8
LINEAR_ATTN_DECODE_KERNELS = 2
#: kernels of a fused-MoE layer: routing/align, gate-up grouped GEMM, activation,
#: down grouped GEMM, weighted sum.  Each engine's kernels scale it by their fixed-cost rate
#: (``KernelRates.moe_fixed``: their sorting, permutation and launches).
MOE_KERNELS = 8
#: a grouped-GEMM output tile's fixed work — filling its load pipeline, the epilogue's
#: activation or scatter and store — in elements of its K loop.  It is what an expert sliced
#: thin by tensor parallelism pays: the down projection's K is the expert's slice of the
#: intermediate size, 64-256 at TP 8-32 (Kimi's 2048 at TP 32: 64).  Measured (aiconfigurator
#: moe_perf, every engine and format, tensor-parallel rows past 1k tokens, before this term): the
#: op model was 34% too fast at slices of 64, 28% at 128, 14% at 256 and right from 512 up —
#: the down GEMM's ``1 + K₀/slice`` slowdown on its third of the FLOPs with K₀ ≈ 100-150.
MOE_TILE_OVERHEAD_K = 128.0
#: weight columns (output columns of a grouped GEMM, one expert's) one thread block streams: the
#: 128-wide weight tiles of the fused-MoE kernels (Triton's BLOCK_SIZE_N 128 at large batch, the
#: TensorRT-LLM-generated kernels' 128-row weight tile with tokens on the narrow side, CUTLASS's).
MOE_WEIGHT_TILE = 128.0
#: bytes of weight one SM keeps in flight while streaming a tile's K loop: a 4-stage load pipeline
#: of 16 KiB weight stages (128 columns × 128 fp8 or × 64 bf16 elements), 64 KiB of the SM's
#: 228 KiB shared memory.
MOE_SM_BYTES_IN_FLIGHT = 65536.0
#: HBM load latency under load on Hopper / Blackwell (about 0.6-1 us).
MOE_HBM_LATENCY_S = 0.8e-6
#: what one SM can stream by Little's law (bytes in flight / latency: 82 GB/s).  A grouped GEMM
#: with fewer weight-column tiles than SMs — a few experts touched, each sliced thin by tensor
#: parallelism (DeepSeek's 2048-wide expert at TP 32: one 128-column gate-up tile an expert) —
#: streams its weights on those tiles' SMs only, below the HBM rate: 148 SMs × 82 GB/s is
#: 12 TB/s, 8 SMs 0.66.  Measured (aiconfigurator moe_perf, Blackwell NVFP4 and MXFP4 × MXFP8,
#: 1-8 tokens over 64-256 ranks): the tables hold a 19-23 us floor (median) that the op model,
#: streaming those experts at the HBM rate, read 28-29% under; with this limit 12-14% under.
MOE_SM_STREAM_BPS = MOE_SM_BYTES_IN_FLIGHT / MOE_HBM_LATENCY_S


def _tile_factor(tm: int, tn: int) -> float:
    def f(a, b):
        i = a * b / (a + b)
        return i / (i + TILE_INTENSITY_HALF)
    return f(tm, tn) / f(*GEMM_TILES[-1])


_TILE_EFF = {tiles: tuple(_tile_factor(tm, tn) for tm, tn in tiles) for tiles in (GEMM_TILES, WEIGHT_ONLY_TILES)}


def ramped(t, r: float):
    """A streaming time ``t`` (seconds; float or array) with a ramp and tail of ``r`` seconds:
    ``t + r·t/(t + r)``, about ``2t`` while ``t ≪ r`` and ``t + r`` once ``t ≫ r``."""
    return t + r * t / (t + r) if r else t


class OpModel:
    """Per-op costs on one GPU with one parameter set; see module docstring."""

    def __init__(self, gpu: GPUSpec, params, rates: KernelRates = NO_RATES) -> None:
        """``rates``: the serving engine's own kernels' rates on this GPU (perf/engine_kernels.py)."""
        self.gpu, self.p, self.rates = gpu, params, rates
        self.bw = gpu.memory_bandwidth_gbs * 1e9
        self.mem_eff = min(params.mem_eff, gpu.ceiling("hbm"))
        self.bw_eff = self.bw * self.mem_eff
        self.t_kernel = gpu.kernel_latency_us * 1e-6
        self.t_ramp = gpu.stream_ramp_us * 1e-6
        self.sms = gpu.sm_count or 0
        self.peak_attn = gpu.peak_flops("bf16") * min(1.0, gpu.ceiling("bf16"))
        #: a flash-attention thread block's fixed work in key blocks of a 128-wide head on this
        #: GPU (:data:`ATTN_CTA_REF_SM_FLOPS`); with no SM count, :data:`ATTN_CTA_OVERHEAD_BLOCKS`
        self.cta_blocks = ATTN_CTA_OVERHEAD_BLOCKS * (self.peak_attn / self.sms / ATTN_CTA_REF_SM_FLOPS
                                                      if self.sms else 1.0)

    def _ramped(self, mem):
        """A streaming time with the kernel's ramp and tail (``GPUSpec.stream_ramp_us``)."""
        return ramped(mem, self.t_ramp)

    # ------------------------------------------------------------------ GEMM
    def gemm_eff(self, dtype: str) -> tuple[float, float]:
        """(peak FLOP/s, efficiency) of a GEMM with ``dtype`` weights on this GPU."""
        prec = compute_precision(dtype, self.gpu)
        return self.gpu.peak_flops(prec), min(self.p.gemm_eff_max, self.gpu.ceiling(prec))

    def stream_ratio(self, dtype: str) -> float:
        """How fast kernels stream ``dtype`` weights relative to bf16 weights on this GPU
        (``GPUSpec.achievable['stream_<format>']``, measured from the kernel tables; 1 for
        bf16 and for formats the GPU's file does not list)."""
        fmt = dtype.lower()
        if fmt in ("bf16", "fp16"):
            return 1.0
        fmt = "nvfp4" if fmt == "fp4" else fmt
        return self.gpu.ceiling(f"stream_{fmt}")

    def quantized(self, dtype: str) -> bool:
        """Whether GEMMs with ``dtype`` weights run on this GPU's fp8 / fp4 tensor cores (their
        activations quantized too), rather than at the bf16 peak."""
        return self.gpu.peak_flops(compute_precision(dtype, self.gpu)) > self.gpu.peak_flops("bf16")

    def split_k(self, dtype: str) -> tuple[int, ...]:
        """Split-K factors the kernels for ``dtype`` weights choose among: bf16 (cuBLAS) splits K
        when the output is too small to fill the SMs, fp8 / fp4 kernels do not (:data:`QUANTIZED_SPLIT_K`)."""
        return QUANTIZED_SPLIT_K if self.quantized(dtype) else SPLIT_K

    def weight_only(self, dtype: str) -> bool:
        """Whether GEMMs with ``dtype`` weights are weight-only: weights narrower than bf16
        multiplied at the bf16 peak (int4, int8_wo; 4-bit formats on GPUs without fp4 units)."""
        return weight_bytes(dtype) < 2.0 and compute_precision(dtype, self.gpu) == "bf16"

    def gemm_tiles(self, dtype: str) -> tuple[tuple[int, int], ...]:
        """Output tiles the kernels for ``dtype`` weights choose among (:data:`WEIGHT_ONLY_TILES`
        for weight-only formats, else :data:`GEMM_TILES`)."""
        return WEIGHT_ONLY_TILES if self.weight_only(dtype) else GEMM_TILES

    def gemm_compute(self, m, n, k, peak: float, eff: float, splits: tuple[int, ...] = SPLIT_K,
                     tiles: tuple[tuple[int, int], ...] = GEMM_TILES):
        """Compute seconds of ``[m,k]×[k,n]``: output tiles in waves over the SMs, best tiling
        among ``tiles`` (each tile's K loop split ``s`` ways for ``s`` in ``splits``)."""
        m = np.asarray(m, dtype=np.float64)
        n = np.asarray(n, dtype=np.float64)
        k = np.asarray(k, dtype=np.float64)
        flops = 2.0 * m * n * k
        if not self.sms:
            return flops / (peak * eff)
        best = np.full(np.broadcast(m, n, k).shape, np.inf)
        sm_rate = peak * eff / self.sms
        for (tm, tn), tf in zip(tiles, _TILE_EFF.get(tiles) or tuple(_tile_factor(*t) for t in tiles)):
            n_tiles = np.ceil(m / tm) * np.ceil(n / tn)
            for s in splits:
                units = n_tiles * s
                waves = np.ceil(units / self.sms)
                t = waves * 2.0 * tm * tn * np.ceil(k / s) / (sm_rate * tf)
                if s > 1:  # partial sums written and reduced in fp32
                    t = t + m * n * 4.0 * s / self.bw_eff
                best = np.minimum(best, np.where((s == 1) | (k / s >= 256), t, np.inf))
        # a padded tile never beats the ideal rate
        return np.maximum(best, flops / (peak * eff))

    def gemm(self, m, n, k, dtype: str = "bf16", act_bytes: float | None = None, dynamic_scale: bool = False):
        """``[m, k] × [k, n]`` with ``dtype`` weights: one kernel, tiles and waves, roofline.

        ``dynamic_scale``: a quantized GEMM whose op derives its per-tensor activation scale at run
        time (:data:`DYNAMIC_SCALE_KERNELS` more kernels and one more pass over the activations);
        serving uses the checkpoint's static scales, the kernel tables' TensorRT-LLM fp8 op does not."""
        peak, eff = self.gemm_eff(dtype)
        wb = weight_bytes(dtype)
        fixed = self.t_kernel
        if self.weight_only(dtype):  # the engine's mixed-input op: its math rate and fixed cost
            eff = eff * self.rates.gemm_wo(dtype)
            fixed = fixed * self.rates.gemm_wo_fixed(dtype)
        m = np.asarray(m, dtype=np.float64)
        if self.p.gemm_half_tokens:
            eff = eff * m / (m + self.p.gemm_half_tokens)
        k = np.asarray(k, dtype=np.float64)
        quantized = self.quantized(dtype)
        ab = act_bytes if act_bytes is not None else (wb if quantized else 2.0)
        mem = (np.asarray(n, float) * k * wb / self.stream_ratio(dtype) + m * k * ab
               + m * np.asarray(n, float) * 2.0) / self.bw_eff
        mem = self._ramped(mem)
        comp = self.gemm_compute(m, n, k, peak, eff, self.split_k(dtype), self.gemm_tiles(dtype))
        t = fixed + np.maximum(comp, mem)
        prec = compute_precision(dtype, self.gpu) if quantized else ""
        if quantized and not (prec in FUSED_QUANT_PRECISIONS and self.rates.act_quant_fused):
            # the activation-quantization kernel: read bf16, write the low-precision copy (an
            # engine that writes per-tensor fp8 / NVFP4 in the producing kernel's epilogue runs none)
            fixed = self.gpu.quant_op_latency_us.get(prec, 0.0) * 1e-6 * self.rates.gemm_quant(dtype)
            t = t + self.t_kernel + fixed + m * k * (2.0 + ab) / self.bw_eff
            if dynamic_scale:  # scale cleared, absolute maximum reduced over the activations, scale cast
                t = t + DYNAMIC_SCALE_KERNELS * self.t_kernel + m * k * 2.0 / self.bw_eff
        return t

    # ------------------------------------------------------------- attention
    def attention_prefill(self, batch, new, cached, heads, kv_heads, head_dim, window=0, kv_bytes=2.0):
        """Causal flash attention of ``batch`` chunks of ``new`` tokens after ``cached`` ones.

        Compute runs over the padded chunk's query blocks (a sliding window's over whole key
        blocks, at the engine's windowed-kernel rate; a window over the chunk's whole context,
        ``window ≥ cached + new``, masks nothing: causal attention through the full kernel —
        TensorRT-LLM's Hopper table at 8k-token windows read 50-125% too slow at its windowed
        rate); the query blocks of every (chunk, head)
        are the thread blocks, run in waves over the SMs.  An engine whose kernel packs the query
        heads of a KV head into a block's rows (``KernelRates.prefill_pack_gqa``) fills a block
        with ``128/g`` tokens of ``g`` heads: a short chunk runs one block per KV head, not one per
        query head.
        Memory: the chunk's keys and values (prefix included) once, streamed under the math;
        the new tokens' own traffic (:func:`prefill_exposed_bytes`: Q read, O written, the new K
        and V copied into the cache) added to it.
        """
        p = self.p
        b = np.asarray(batch, float)
        n = np.asarray(new, float)
        c = np.asarray(cached, float)
        w = np.asarray(window, float)
        w = np.where(w >= n + c, 0.0, w)  # a window over the whole context is causal attention
        h = np.asarray(heads, float)
        blk = ATTN_BLOCK
        # query heads per KV head packed into one block's rows (KernelRates.prefill_pack_gqa; full
        # and windowed attention): a block holds 128 (token, head) rows, a chunk ceil(n·g/128)
        # blocks per KV head
        kvh = np.asarray(kv_heads, float)
        g = np.where(h % kvh != 0, 1.0, h / kvh) if self.rates.prefill_pack_gqa else np.ones_like(h)
        nq = np.ceil(n * g / blk)
        q_pad = nq * blk
        # full attention: the padded chunk's (query, key) pairs after the whole prefix, per query
        # head (packed: its rows' tokens, q_pad/g of them, each block's fixed work shared by its g
        # heads); a sliding window: the whole key blocks its query blocks reach (window_key_blocks,
        # packed_window_key_blocks), per query head
        cta = self.cta_blocks * blk * blk * ATTN_CTA_HEAD_DIM / np.asarray(head_dim, float) \
            * np.where(w > 0, self.rates.prefill_attention_fixed("gqa_window"), self.rates.prefill_attention_fixed("gqa"))
        w1 = np.where(w > 0, w, 1.0)
        wkb = np.where(g > 1, packed_window_key_blocks(n, c, w1, g), window_key_blocks(n, c, w1))
        pairs = np.where(w > 0, wkb * blk * blk + nq * cta, q_pad * c + 0.5 * q_pad * (q_pad / g + 1.0) + nq * cta) / g
        eff = p.attn_prefill_eff_max * (n / (n + p.attn_prefill_half_tokens) if p.attn_prefill_half_tokens else 1.0)
        eff = eff * np.where(w > 0, self.rates.prefill_attention("gqa_window"), self.rates.prefill_attention("gqa"))
        ideal = b * pairs * 4.0 * h * head_dim / (self.peak_attn * eff)
        if self.sms:
            ctas = b * h / g * nq
            util = ctas / (np.ceil(ctas / self.sms) * self.sms)
            comp = ideal / util
        else:
            comp = ideal
        read = np.where(w > 0, np.minimum(n + c, np.where(w > 0, w + n, 1.0)), n + c)
        mem = b * read * 2.0 * kv_heads * head_dim * kv_bytes / self.bw_eff
        exposed = b * n * prefill_exposed_bytes(h * head_dim, h * head_dim, 2.0 * kvh * head_dim, kv_bytes) / self.bw_eff
        return ATTN_KERNELS * self.t_kernel + np.maximum(comp, mem) + exposed

    def attention_decode(self, batch, ctx, heads, kv_heads, head_dim, window=0, kv_bytes=2.0):
        """One query token per request over ``ctx`` cached tokens (GQA, paged, split-KV).

        Each request reads its own KV (window-capped) plus a fixed cost of
        ``attn_decode_ctx_overhead_tokens`` (the first, partly used block); the split-KV kernel
        and its combine are two kernels.  Its work units — one per (request, KV head), the query
        heads of a group together — each hold an SM for ``attn_decode_unit_s`` beyond their KV
        stream, ``sm_count`` at a time (:meth:`decode_unit_tokens`).  An engine whose kernel
        takes head groups only up to ``KernelRates.decode_head_group_max`` runs larger groups
        one unit and one KV stream per query head, with no partly used tile (that fallback, the
        masked multi-head kernel, steps through the keys a few at a time).
        """
        p = self.p
        b = np.asarray(batch, float)
        s = np.asarray(ctx, float)
        w = np.asarray(window, float)
        h = np.asarray(heads, float)
        kvh = np.asarray(kv_heads, float)
        streams = self.decode_streams(h, kvh)
        bw = self.bw * self.decode_mem_eff("gqa", kv_bytes)
        per_tok = 2.0 * streams * head_dim * kv_bytes
        # the masked multi-head fallback steps through keys a few at a time: no tile read whole
        over = np.where(streams == kvh, p.attn_decode_ctx_overhead_tokens, 0.0)
        comp_tok = 4.0 * h * head_dim / (self.peak_attn * p.attn_decode_compute_eff)
        s = np.where(w > 0, np.minimum(s, np.where(w > 0, w, 1.0)), s) + over \
            + self.decode_unit_tokens(streams, np.maximum(comp_tok, per_tok / bw))
        comp = b * s * comp_tok
        mem = b * s * per_tok / bw
        return self.decode_fixed("gqa", kv_bytes) + np.maximum(comp, self._ramped(mem))

    def decode_fixed(self, kind: str, kv_bytes=2.0):
        """Seconds of a decode-attention op's fixed cost: :data:`ATTN_KERNELS` kernel latencies
        times the engine's factor for the cache's format (``KernelRates.decode_attention_fixed``)."""
        return ATTN_KERNELS * self.t_kernel * self.rates.decode_attention_fixed(kind, kv_bytes)

    def decode_mem_eff(self, kind: str, kv_bytes):
        """The fraction of the HBM bandwidth decode attention (``kind`` ``gqa`` or ``mla``) streams
        a cache of ``kv_bytes`` per element at: ``attn_decode_mem_eff`` capped by the GPU's ceiling,
        times the engine's kernel rate for the format (``KernelRates.decode_attention``), at most
        the nominal bandwidth."""
        eff = min(self.p.attn_decode_mem_eff, self.gpu.ceiling("hbm"))
        return np.minimum(1.0, eff * self.rates.decode_attention(kind, kv_bytes))

    def decode_streams(self, heads, kv_heads):
        """KV streams (work units) per request of GQA decode attention: one per KV head, or one
        per query head where the engine's kernel does not take the group
        (``KernelRates.decode_head_group_max``)."""
        g = self.rates.decode_head_group_max
        if not g:
            return kv_heads
        return np.where(np.asarray(heads, float) > g * np.asarray(kv_heads, float), heads, kv_heads)

    def decode_unit_tokens(self, units, s_per_token):
        """The decode-attention work units' own time (``units`` per request, each holding one of
        the GPU's SMs for ``attn_decode_unit_s``), as the context tokens the request takes in that
        time (``s_per_token``: seconds per token and layer of whichever bounds the kernel, its KV
        stream or its math, so that the tokens add the units' time in either regime):
        ``units·t_unit/SMs / s_per_token``.  Zero on a GPU with no SM count."""
        if not self.sms:
            return 0.0 * np.asarray(units, float)
        return np.asarray(units, float) * self.p.attn_decode_unit_s / self.sms / s_per_token

    def mla_prefill(self, batch, new, cached, heads, qk_nope=128, qk_rope=64, v_dim=128, kv_lora=512,
                    kv_bytes=2.0):
        """MLA prefill (keys and values expanded per head: q·k over nope+rope dims, then ·v); the new
        tokens' query, output and latent-cache write added to the math as in :meth:`attention_prefill`."""
        p = self.p
        b = np.asarray(batch, float)
        n = np.asarray(new, float)
        c = np.asarray(cached, float)
        h = np.asarray(heads, float)
        nq = np.ceil(n / ATTN_BLOCK)
        pairs = _causal_pairs(nq * ATTN_BLOCK, c) \
            + nq * self.cta_blocks * self.rates.prefill_attention_fixed("mla") * ATTN_BLOCK * ATTN_BLOCK
        eff = p.attn_prefill_eff_max * (n / (n + p.attn_prefill_half_tokens) if p.attn_prefill_half_tokens else 1.0)
        eff = eff * self.rates.prefill_attention("mla")
        comp = b * pairs * 2.0 * h * (qk_nope + qk_rope + v_dim) / (self.peak_attn * eff)
        if self.sms:
            ctas = b * h * nq
            comp = comp / (ctas / (np.ceil(ctas / self.sms) * self.sms))
        mem = b * ((n + c) * (kv_lora + qk_rope) * kv_bytes + (n + c) * h * (qk_nope + v_dim) * 2.0) / self.bw_eff
        exposed = b * n * prefill_exposed_bytes(h * (qk_nope + qk_rope), h * v_dim, kv_lora + qk_rope, kv_bytes) \
            / self.bw_eff
        return ATTN_KERNELS * self.t_kernel + np.maximum(comp, mem) + exposed

    def mla_decode(self, batch, ctx, heads, qk_rope=64, kv_lora=512, kv_bytes=2.0):
        """Absorbed MLA decode: every head attends over the shared latent (+ rope key).

        Heads run in blocks of :data:`MLA_HEAD_BLOCK` (FlashMLA / trtllm-gen), each block of a
        request a work unit holding an SM for ``attn_decode_unit_s`` beyond its latent stream,
        as GQA decode's units (:meth:`decode_unit_tokens`)."""
        p = self.p
        b = np.asarray(batch, float)
        h = np.asarray(heads, float)
        # fewer heads than a block pad it
        blocks = np.ceil(h / MLA_HEAD_BLOCK)
        h_pad = blocks * MLA_HEAD_BLOCK
        bw = self.bw * self.decode_mem_eff("mla", kv_bytes)
        per_tok = (kv_lora + qk_rope) * kv_bytes
        comp_tok = 2.0 * h_pad * (2 * kv_lora + qk_rope) / (self.peak_attn * p.attn_decode_compute_eff)
        s = np.asarray(ctx, float) + p.attn_decode_ctx_overhead_tokens \
            + self.decode_unit_tokens(blocks, np.maximum(comp_tok, per_tok / bw))
        comp = b * s * comp_tok
        mem = b * s * per_tok / bw
        return self.decode_fixed("mla", kv_bytes) + np.maximum(comp, self._ramped(mem))

    # ------------------------------------------------------------------- MoE
    def moe(self, tokens, hidden, inter, topk, experts, moe_tp=1, ep=1, dtype: str = "bf16",
            touched=None, slots=None, act_dtype: str | None = None, gated: bool = True,
            kernel: str | None = None):
        """Routed experts on one GPU for ``tokens`` tokens: gate-up and down grouped GEMMs.

        ``touched``: experts of this GPU that receive tokens (default: uniform random routing,
        ``local × (1 − (1 − k/E)^tokens)``).  Each touched expert's rows are padded to the
        grouped GEMM's row tile; weights are read for touched experts only, each touched expert
        adding ``moe_expert_s`` to the streaming (its weight pipeline drained and refilled).

        ``slots``: the (token, top-k) entries of the kernel's input, remote experts' masked ones
        included (default: the ``tokens·k/ep`` pairs routed here, what an all-to-all dispatch
        delivers).  A rank handed the whole batch with remote experts masked (the engines' plain
        expert parallelism, and the kernel tables' expert-parallel rows) still moves every
        masked slot's rows through its routing, permutation and weighted sum, at the engine's
        ``moe_masked`` rate: kernels apart from the grouped GEMMs, which skip those slots, so
        their time adds to the GEMMs' (TensorRT-LLM's Hopper gpt-oss kernel at 16k tokens: 8.6,
        4.9, 3.0, 2.1 ms over 1, 2, 4, 8 ranks, tending to 1.2 ms at 128 — ~17 ns a slot on top of
        the divided math).  What stays when expert parallelism divides the GEMMs.

        ``act_dtype``: the activations' format where it decides the tensor-core precision —
        ``bf16`` for a weight-only kernel (W4A16 MXFP4), which dequantizes the 4-bit weights and
        multiplies at the bf16 peak whatever units the GPU has for the weights' format.

        ``gated``: gated (SwiGLU: gate and up projections, three matrices an expert) or not
        (squared ReLU: up and down, two matrices; NVIDIA's Nemotron-H MoE).

        ``kernel``: the fused-MoE kernel path the engine runs this model's experts with
        (``engine_kernels.MOE_KERNEL_PATHS``) where it is not the one the engine's rates for the
        format describe (``engine_kernels.MOE_DEFAULT_PATH``): that path's rates; ``marlin`` also
        takes Marlin's row blocks.  None: the format's rates (int4 experts of an engine whose int4
        runs Marlin take Marlin's row blocks).
        """
        p = self.p
        t = np.asarray(tokens, float)
        E = float(experts)
        k = float(topk)
        local = E / ep
        assign = t * k / ep  # (token, expert) pairs on this GPU
        if touched is None:
            touched = local * -np.expm1(t * math.log1p(-k / E)) if k < E else np.full_like(t, local)
        touched = np.maximum(np.asarray(touched, float), 1e-9)
        per_expert = assign / touched
        i_loc = inter / moe_tp
        mats = 3.0 if gated else 2.0  # weight matrices an expert: (gate,) up, down
        peak, eff = self.gemm_eff("bf16" if act_dtype in ("bf16", "fp16") else dtype)
        r = self.rates
        eff = eff * p.moe_eff_scale * r.moe(dtype, kernel)
        # row tile (perf/moe_row_blocks.py): small (16) while experts get few rows, 64 beyond
        # (vLLM / SGLang fused-MoE configs); Marlin's from the average rows of a local expert,
        # triton_kernels' from the expected rows of any expert
        if r.moe_marlin(dtype, kernel):
            tm = marlin_row_block(assign / local)
        elif r.moe_ogs(dtype, kernel):
            tm = ogs_row_block(t * k / E)
        else:
            tm = np.where(per_expert <= 16, 16.0, 64.0)
        rows = touched * np.ceil(per_expert / tm) * tm
        # each output tile's fixed work (pipeline fill, epilogue) as MOE_TILE_OVERHEAD_K more of
        # its K loop: the gate-up GEMM's K is the hidden size, the down GEMM's the expert's slice
        ideal = 2.0 * rows * ((mats - 1.0) * i_loc * (hidden + MOE_TILE_OVERHEAD_K)
                              + hidden * (i_loc + MOE_TILE_OVERHEAD_K)) / (peak * eff)
        if p.moe_half_tokens:
            ideal = ideal * (per_expert + p.moe_half_tokens) / per_expert
        comp = ideal
        if self.sms:  # tiles of the gate-up GEMM (the larger) in waves over the SMs
            tiles = touched * np.ceil(per_expert / tm) * np.ceil((mats - 1.0) * i_loc / 128.0)
            comp = comp / (tiles / (np.ceil(tiles / self.sms) * self.sms))
            comp = np.minimum(comp, np.maximum(ideal, 2.0 * ideal))  # never worse than half the SMs idle
        wb = weight_bytes(dtype)
        # the engine's kernel may stream faster than the dense GEMMs did, never past the GPU's ceiling
        stream = min(self.stream_ratio(dtype) * r.moe_stream(dtype, kernel), self.gpu.ceiling("hbm") / self.mem_eff)
        # each slot's rows: the hidden row in and out, the activation's (gate-)up rows read and
        # its output written; a masked slot at the engine's rate (zeros written and summed by
        # the Triton path, skipped by kernels that permute only their own experts' rows: 0)
        masked = 0.0 if slots is None else np.maximum(np.asarray(slots, float) - assign, 0.0)
        # each GEMM's weights stream through the SMs holding its column tiles: a grouped GEMM with
        # fewer weight-column tiles than SMs streams at most MOE_SM_STREAM_BPS per tile's SM
        bw_w = self.bw_eff * stream
        if self.sms and MOE_SM_STREAM_BPS:
            cols_gu = touched * np.ceil((mats - 1.0) * i_loc / MOE_WEIGHT_TILE)
            cols_dn = touched * np.ceil(hidden / MOE_WEIGHT_TILE)
            w_gu = touched * (mats - 1.0) * hidden * i_loc * wb
            w_dn = touched * hidden * i_loc * wb
            t_w = w_gu / np.minimum(bw_w, np.minimum(cols_gu, self.sms) * MOE_SM_STREAM_BPS) \
                + w_dn / np.minimum(bw_w, np.minimum(cols_dn, self.sms) * MOE_SM_STREAM_BPS)
        else:
            t_w = touched * mats * hidden * i_loc * wb / bw_w
        row_bytes = (2.0 * hidden + mats * i_loc) * 2.0
        mem = t_w + assign * row_bytes / self.bw_eff + touched * p.moe_expert_s
        # the grouped GEMMs skip the masked slots: the routing, permutation and weighted-sum
        # kernels around them move those, added to the GEMMs' time rather than hidden under it
        masked_t = masked * r.moe_masked(dtype, kernel) * row_bytes / self.bw_eff
        return MOE_KERNELS * r.moe_fixed(dtype, kernel) * self.t_kernel + np.maximum(comp, mem) + masked_t

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
        """The engines' custom all-reduce of ``nbytes`` over ``ranks`` GPUs (the pass's
        tensor-parallel all-reduce under CUDA graphs).

        Within the scale-up domain of a GPU with a measured law (``GPUSpec.custom_all_reduce``,
        fitted by benchmarks/fit_collectives.py on the engines' per-kernel tables), the
        ``2(r − 1)/r·S`` bytes each GPU moves go at ``bus_eff`` of the link bandwidth behind
        a fixed cost of ``startup`` plus ``step`` per doubling of ranks, with the pipeline's
        fill between: ``(√(V / bandwidth) + √(startup + log2(r) · step))²``.  Otherwise the
        faster of the two algorithms the kernels switch between by size, priced from the links
        (``comm_eff``, ``allreduce_fixed_s``, the link latency per doubling of ranks):

        - one-shot: every GPU reads the whole message from each peer and reduces locally —
          one step, ``(r − 1)·S`` bytes received;
        - two-shot (reduce-scatter + all-gather): two steps, ``2(r − 1)/r·S`` bytes.

        ``comm_time_scale`` scales the time either way.
        """
        r, link, lat = self._link(ranks)
        s = np.asarray(nbytes, float)
        step = lat * np.log2(r)
        fixed = self.p.allreduce_fixed_s * self.p.comm_time_scale
        one_shot = step + (r - 1) * s / link
        two_shot = 2.0 * step + 2.0 * (r - 1) / r * s / link
        t = fixed + np.minimum(one_shot, two_shot)
        law = self.gpu.custom_all_reduce
        if law is None:
            return t
        scale = self.p.comm_time_scale
        bw = self.gpu.scale_up.bandwidth_gbs * 1e9 * law.bus_eff / scale
        hops = (law.startup_us + np.log2(r) * law.step_us) * 1e-6 * scale
        measured = (np.sqrt(collective_volume("all_reduce", s, r) / bw) + np.sqrt(hops)) ** 2
        return np.where(r <= self.gpu.scale_up.domain_size, measured, t)

    def all_gather(self, nbytes, ranks):
        """NCCL all-gather whose full result is ``nbytes`` (:meth:`nccl`)."""
        return self.nccl("all_gather", nbytes, ranks)

    def all_to_all(self, nbytes, ranks):
        """NCCL all-to-all where each GPU holds ``nbytes`` and keeps ``1/r`` of it (:meth:`nccl`)."""
        return self.nccl("alltoall", nbytes, ranks)

    def nccl(self, op: str, nbytes, ranks):
        """NCCL collective ``op`` (``hardware.gpu.NCCL_OPS``) of ``nbytes`` over ``ranks`` GPUs.

        NCCL pipelines the data each GPU sends (:func:`collective_volume`) in chunks through
        :func:`collective_steps` hops; with chunks chosen well that takes
        ``(√(V / bandwidth) + √(startup + steps · step))²``: the fixed cost for small messages,
        the bus rate for large ones, the pipeline's fill between.  Within the scale-up domain
        the GPU's measured law (``GPUSpec.nccl``, benchmarks/fit_collectives.py) sets startup,
        step and bus efficiency; a GPU without one, or ranks beyond the domain, take the
        links' figures (``comm_eff``, ``allreduce_fixed_s`` or ``alltoall_fixed_s``, the link
        latency per hop).  ``comm_time_scale`` scales the time either way.
        """
        if op not in NCCL_OPS:
            raise ValueError(f"unknown NCCL collective {op!r}; expected one of {', '.join(NCCL_OPS)}")
        r, link, lat = self._link(ranks)
        p = self.p
        vol = collective_volume(op, nbytes, r)
        steps = collective_steps(op, r)
        fixed = (p.alltoall_fixed_s if op == "alltoall" else p.allreduce_fixed_s) * p.comm_time_scale
        hops = fixed + steps * lat
        law = self.gpu.nccl.get(op)
        if law is not None:
            inside = r <= self.gpu.scale_up.domain_size
            bw = self.gpu.scale_up.bandwidth_gbs * 1e9 * law.bus_eff / p.comm_time_scale
            measured = (law.startup_us + steps * law.step_us) * 1e-6 * p.comm_time_scale
            link = np.where(inside, bw, link)
            hops = np.where(inside, measured, hops)
        return (np.sqrt(vol / link) + np.sqrt(hops)) ** 2

    # ------------------------------------------------------ linear attention
    def gated_delta(self, requests, tokens, v_heads, head_k=128, head_v=128, prefill=False, longest=None):
        """Gated-DeltaNet update: per-token state FLOPs; each request's state read and written.

        The chunked prefill form also waits on its chains: each (sequence, value head) passes
        its state from one 64-token chunk to the next in order, so a sequence of ``L`` tokens
        takes ``L × linear_attn_chain_s`` however fast the math, and the chains run in waves
        over the SMs.  ``longest``: the longest sequence's tokens (default: ``tokens`` spread
        evenly over ``requests``).  The engine's own kernel sets the math rate, the chain
        latency and the fixed cost (``KernelRates.linear_attn*``).
        """
        p = self.p
        r = self.rates
        n = np.asarray(requests, float)
        t = np.asarray(tokens, float)
        eff = p.linear_attn_eff * (r.linear_attn() if prefill else 1.0)
        comp = t * p.linear_attn_flops_factor * v_heads * head_k * head_v / (self.peak_attn * eff)
        mem = n * 2.0 * v_heads * head_k * head_v * p.state_dtype_bytes / self.bw_eff
        if not prefill:
            return LINEAR_ATTN_DECODE_KERNELS * self.t_kernel + np.maximum(comp, mem)
        seq = t / np.maximum(n, 1.0) if longest is None else np.asarray(longest, float)
        chains = n * np.asarray(v_heads, float)
        waves = np.ceil(chains / self.sms) if self.sms else 1.0
        chain = waves * seq * p.linear_attn_chain_s * r.linear_attn_chain()
        fixed = LINEAR_ATTN_KERNELS * r.linear_attn_fixed() * self.t_kernel
        return fixed + np.maximum(np.maximum(comp, chain), mem)

