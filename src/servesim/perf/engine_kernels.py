"""The rate each serving engine's own kernels run at, relative to the op model, per GPU generation.

The op model (:mod:`servesim.perf.kernels`) prices an op from its shape and the GPU alone.  The
engines run different kernels for the same op: SGLang prefills MLA on Hopper through
FlashAttention-3 over expanded 192-dim keys, TensorRT-LLM through its own MLA kernel; vLLM,
SGLang and TensorRT-LLM each ship their own fused-MoE grouped GEMMs and gated-delta (linear
attention) prefill kernels.  Their measured per-kernel
tables (aiconfigurator-core, one per engine, GPU and precision) show each engine's kernel family
running at its own rate: SGLang's MLA prefill on H100 / H200 at 0.38 of the op model, TensorRT-
LLM's at 0.93; the fused-MoE kernels' math between 0.5 and 2.6 of it where a rate beats it (Marlin's
int4 on Blackwell 0.49, vLLM's gpt-oss MXFP4 kernel on Hopper 2.2, SGLang's NVFP4 on Blackwell 2.6).

``engine_kernels.yaml`` records those rates, one per (engine, CUDA major version, op, format),
fitted on the engines' kernel tables by ``benchmarks/fit_kernel_ceilings.py --engine-kernels``
(per-kernel physics; no end-to-end result enters).  A rate multiplies the op's compute
efficiency, or for ``decode_attention`` the rate decode attention streams its KV cache at (per
cache format, never past the HBM's nominal bandwidth) and for ``decode_attention_fixed`` a
factor on that op's kernel count, or for ``moe_stream`` the rate the MoE kernel streams expert weights at (never past
the GPU's measured HBM ceiling), or for ``moe_fixed`` the fused-MoE layer's kernel count (its
routing, sorting and permutation work and launches: what a handful of tokens is bound by), or
for ``moe_masked`` the traffic of a masked slot in its input (a remote expert's, under expert
parallelism without an all-to-all dispatcher: ``kernels.OpModel.moe``; 0 for a kernel that
skips them).  Per-tensor-scaled fp8 experts have rates of their own, format ``fp8_tensor``
(:attr:`KernelRates.fp8_per_tensor`), and so does each fused-MoE kernel path an engine runs
besides its default one for a format, format ``<format>@<path>`` (:data:`MOE_DEFAULT_PATH`,
``kernels.OpModel.moe(kernel=...)``); for
the gated-delta prefill kernel, ``linear_attn`` multiplies its
math rate, ``linear_attn_chain`` its per-token chain latency and ``linear_attn_fixed`` its kernel
count.  For the dense GEMMs, ``gemm_quant`` multiplies the fixed cost of the engine's NVFP4
activation-quantization op beyond its kernel latency (``GPUSpec.quant_op_latency_us['fp4']``,
fitted on all engines' tables pooled): SGLang's and vLLM's NVFP4 GEMM tables time the same
FlashInfer CuTe-DSL GEMM, yet SGLang's smallest shapes take 3.5-3.9 us on Blackwell and vLLM's
6-7 us, TensorRT-LLM's 6-7 us — the quantization kernels differ.  ``gemm_wo`` multiplies the
math rate of an engine's weight-only GEMM (int8 / int4 weights dequantized in the kernel, bf16
math) and ``gemm_wo_fixed`` its fixed cost, a factor on the kernel latency: TensorRT-LLM's A100
weight-only ops take 18-20 us at their smallest shapes (five kernel latencies, where its bf16
GEMMs take one), SGLang's H100 int8 weight-only op 18 us and runs its math at about half the
bf16 rate.  1 (no entry) keeps the op model as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from servesim.errors import ConfigError
from servesim.perf.analytic_params import AnalyticParams
from servesim.yaml_io import safe_load

RATES_FILE = Path(__file__).with_name("engine_kernels.yaml")
#: Ops a rate can apply to, with the formats each names.
OPS = {"prefill_attention": ("mla", "gqa", "gqa_window"), "prefill_attention_fixed": ("mla", "gqa", "gqa_window"),
       "decode_attention": ("gqa", "gqa_fp8", "mla", "mla_fp8"),
       "decode_attention_fixed": ("gqa", "gqa_fp8", "mla", "mla_fp8"),
       "moe": ("bf16", "fp8", "fp8_tensor", "fp4", "mxfp4", "int4"),
       "moe_stream": ("bf16", "fp8", "fp8_tensor", "fp4", "mxfp4", "int4"),
       "moe_fixed": ("bf16", "fp8", "fp8_tensor", "fp4", "mxfp4", "int4"),
       "moe_masked": ("bf16", "fp8", "fp8_tensor", "fp4", "mxfp4", "int4"),
       "linear_attn": ("gdn",), "linear_attn_chain": ("gdn",), "linear_attn_fixed": ("gdn",),
       "gemm_quant": ("fp4",), "gemm_wo": ("int8_wo", "int4"), "gemm_wo_fixed": ("int8_wo", "int4")}
#: A rate outside this range is a table or fitting error, not a kernel.
RATE_RANGE = (0.1, 3.0)
#: The gated-delta prefill kernel's math rate spans more: vLLM's FlashInfer kernel runs it on
#: tensor cores, at ~7.7 times (Hopper) the rate of the FLA-style Triton kernels the op model's
#: default (``AnalyticParams.linear_attn_eff``) describes.
LINEAR_ATTN_RATE_RANGE = (0.1, 10.0)
#: A prefill-attention kernel's math rate at most brings its efficiency to the GPU's measured
#: ceiling: ``rate × attn_prefill_eff_max ≤ 1`` (fitted freely, SGLang's Hopper windowed kernel
#: took 1.91, 1.24× the ceiling: what FlashAttention-3's 192-row query tiles for 64-wide heads
#: buy, which the op model's 128-row blocks do not count, and no rate may stand in for).
PREFILL_RATE_RANGE = (0.1, 1.0 / AnalyticParams().attn_prefill_eff_max)
#: A fused-MoE layer's fixed cost spans more too: its routing, sorting and permutation kernels
#: and launches take 40-65 us on H200 in vLLM's block-fp8 path (2x ``MOE_KERNELS`` kernel
#: latencies; 2.4x in vLLM's Marlin int4 path on Blackwell; TensorRT-LLM's Hopper MXFP4 path
#: 3.9x).  A weight-only dense GEMM op's fixed cost (``gemm_wo_fixed``, a factor on one kernel's
#: latency) takes the same range: TensorRT-LLM's A100 ops 5x, SGLang's H100 int8 op 10x.
MOE_FIXED_RATE_RANGE = (0.1, 10.0)
#: A masked slot's traffic (``moe_masked``) may be none at all: a kernel that permutes only its
#: own experts' rows skips them.
MOE_MASKED_RATE_RANGE = (0.0, 3.0)


#: Fused-MoE kernel paths (the families of the tables' ``kernel_source``): the engines' Triton
#: fused MoE (SGLang's and vLLM's, OpenAI's Triton MXFP4 kernels), Marlin's mixed-input MoE, FlashInfer's
#: CUTLASS MoE, the TensorRT-LLM-generated MoE kernels (FlashInfer's ``trtllm`` MoE, TensorRT-LLM's
#: own Blackwell MoE), and ``trtllm_a16``: those kernels with bf16 activations on a GPU with fp4
#: units (W4A16 MXFP4 on Blackwell: another kernel than the MXFP8-activation one served there), and
#: ``nongated``: squared-ReLU experts beside a table's gated default-path rows (TensorRT-LLM's
#: Blackwell NVFP4 tables time NVIDIA's Nemotron-H MoE; no bundled model has them, so serving never
#: takes it: its rates keep those rows out of the gated experts' fit).
MOE_KERNEL_PATHS = ("triton", "marlin", "cutlass", "trtllm", "trtllm_a16", "deepgemm", "nongated")
#: (engine, CUDA major, format) → the kernel path the rates of that format describe, where the
#: engine's table measures more than one: the path most of its table's models run.  An engine
#: picks the path per model (aiconfigurator's collectors pin the backend the engine serves each
#: model with: SGLang's per-model ``sglang_moe_backends`` of its case plans, vLLM's own backend
#: selection), so a model on another path takes that path's rates (``OpModel.moe(kernel=...)``,
#: format ``<format>@<path>`` in engine_kernels.yaml).  Measured (aiconfigurator moe_perf,
#: SGLang 0.5.14's bf16 MoE on B200 / B300 / GB200 / GB300): priced with one rate fitted on both,
#: its Triton rows took 1.9-2.4x the priced time and its FlashInfer TensorRT-LLM rows 0.87-0.93x
#: (median per GPU); with a rate each, 15.8% and 13.5% median error on one node's layouts.
#: TensorRT-LLM's Blackwell NVFP4 table times each shape on both of its backends' kernels, CUTLASS
#: (``moe_torch_flow_cutlass``) and the TRTLLM backend's generated ones (``..._min_latency``), the
#: latter about half the time at decode sizes: its rates are the TRTLLM backend's (what
#: InferenceX's DeepSeek scripts run without attention DP), ``fp4@cutlass`` CUTLASS's
#: (TensorRT-LLM's default ``moe_config.backend``; the engine plan's ``moe_kernel``).  Its Blackwell
#: block-fp8 table times DeepGEMM's kernels only (``fp8@deepgemm``, its DEEPGEMM backend): the
#: TRTLLM and CUTLASS backends' block-fp8 kernels, which no table times, keep the op model.
MOE_DEFAULT_PATH = {("sglang", 9, "bf16"): "triton", ("sglang", 10, "bf16"): "trtllm",
                    ("sglang", 10, "fp8"): "trtllm", ("sglang", 9, "mxfp4"): "triton", ("sglang", 10, "mxfp4"): "trtllm",
                    ("vllm", 9, "fp8"): "triton", ("vllm", 10, "bf16"): "trtllm",
                    ("vllm", 10, "fp8_tensor"): "trtllm", ("vllm", 10, "fp4"): "trtllm",
                    ("vllm", 9, "mxfp4"): "triton", ("vllm", 10, "mxfp4"): "trtllm",
                    ("trtllm", 10, "fp4"): "trtllm", ("trtllm", 10, "fp8"): "trtllm",
                    ("trtllm", 10, "mxfp4"): "trtllm"}


#: (engine, CUDA major) whose int4 experts run Marlin's fused MoE (kernel sources of the engines'
#: ``int4_wo`` tables: vLLM's compressed-tensors W4A16 Marlin path on Hopper and Blackwell,
#: SGLang's Marlin MoE on Hopper; SGLang on Blackwell runs FlashInfer's TensorRT-LLM MoE instead).
#: Marlin picks its row block by the rows an expert gets (``moe_row_blocks.marlin_row_block``).
MARLIN_INT4 = frozenset({("vllm", 9), ("vllm", 10), ("sglang", 9)})
#: (engine, CUDA major) whose MXFP4 experts (gpt-oss) run OpenAI's ``triton_kernels`` grouped
#: matmul on their default path, with its own row blocks (``moe_row_blocks.ogs_row_block``):
#: vLLM's default MXFP4 backend on Hopper (its table's kernel source names it) and TensorRT-LLM's
#: TRITON MoE backend, which its Hopper gpt-oss recipes select (InferenceX gptoss_fp4_h200_trt.sh:
#: ``moe_config.backend: TRITON``).  SGLang's Hopper MXFP4 table times its generic fused Triton
#: MoE instead, which keeps the fused kernels' row tile.
OGS_MXFP4 = frozenset({("vllm", 9), ("trtllm", 9)})

#: (engine, CUDA major) whose prefill attention packs the query heads sharing a KV head into the
#: rows of one query block (FlashAttention-3's PackGQA: its heuristic packs whenever the query is
#: variable-length, as every serving engine calls it, and the model has grouped heads, with or
#: without a sliding window), so a block holds ``128/g`` tokens of ``g`` heads.  SGLang's and
#: vLLM's FlashAttention-3 on Hopper; measured (their H100 / H200 context tables): a one-token
#: chunk takes the time of its KV heads' blocks, not its query heads' — 128 one-token chunks with
#: 48 query heads over 2 KV heads take 19 us on H200, with 32 over 32 115 us, where per-query-head
#: blocks price both alike.  TensorRT-LLM's FMHA and the Blackwell kernels are left as they were
#: (packing them does not fit their tables).
PACK_GQA_PREFILL = frozenset({("sglang", 9), ("vllm", 9)})

#: Engines whose decode-attention kernel takes query-head groups (query heads per KV head) only
#: up to a size, and the largest it takes.  TensorRT-LLM's decode attention (XQA on Hopper, its
#: generated kernels on Blackwell) is compiled for a set of group sizes; a model whose group is
#: larger falls back to the masked multi-head attention kernel, one thread block per (request,
#: query head), each streaming its KV head on its own.  Measured (aiconfigurator-core TensorRT-LLM
#: generation tables, every GPU): groups of 24 and 32 run within -16..-28% of the op model, groups
#: of 48-128 take 6-12x its time (at 1024 requests of 2 tokens and 64 query heads: 0.6 ms at head
#: size 64, 128 and 256 alike, 9 ns per (request, query head): one work unit each, not one per KV
#: head).  SGLang's and vLLM's kernels take any group (their tables: 1.1-2x at groups of 48+).
DECODE_HEAD_GROUP_MAX = {"trtllm": 32}

#: Engines whose per-tensor fp8 and NVFP4 GEMMs take activations already quantized by the kernel
#: that produced them, so such a GEMM runs no quantization kernel of its own.  A per-tensor fp8
#: checkpoint (NVIDIA's ModelOpt exports) carries static input scales, and TensorRT-LLM writes
#: the fp8 copy in the producer's epilogue: its all-reduce fusion ends in residual add, RMSNorm
#: and fp8 quantization (the q/k/v and gate/up inputs), its context attention writes fp8 output
#: (the o-projection's input) and its SwiGLU kernel quantizes what it writes (the down
#: projection's).  Its NVFP4 decoder layers (Llama, DeepSeek, GLM: ``is_nvfp4``) take the same
#: all-reduce fusion's NVFP4 variant (residual add, RMSNorm, fp4 values and block scales out);
#: the other GEMMs' inputs are taken as fused the same way (not read in its source: the
#: end-to-end figures below).  Block-scaled fp8 (128-wide groups per token: DeepSeek's, Qwen's FP8
#: releases) still runs a quantization kernel before the GEMM there, as everything does in SGLang
#: and vLLM; the op model prices it (``GPUSpec.quant_op_latency_us`` times the engine's
#: ``gemm_quant`` rate for NVFP4, plus the copy's traffic).  Measured end to end (uncalibrated):
#: InferenceX's TensorRT-LLM Llama-3.1-70B fp8 rows, TPOT +14% / +13% (H200 / B200, median) with
#: the kernel, +10% / +2% without; the 134 TensorRT-LLM NVFP4 rows on B200, TPOT bias +11.4%
#: with the kernel at TensorRT-LLM's measured op cost, +3.8% without.
FUSED_ACTIVATION_QUANT = frozenset({"trtllm"})
#: The compute precisions whose activation quantization such an engine fuses.
FUSED_QUANT_PRECISIONS = frozenset({"fp8", "fp4"})


def rate_range(op: str) -> tuple[float, float]:
    """The range a rate of ``op`` must lie in (:data:`RATE_RANGE`, wider for the gated-delta math,
    the fused-MoE fixed cost and its masked slots)."""
    if op == "linear_attn":
        return LINEAR_ATTN_RATE_RANGE
    if op == "moe_masked":
        return MOE_MASKED_RATE_RANGE
    if op == "prefill_attention":
        return PREFILL_RATE_RANGE
    return MOE_FIXED_RATE_RANGE if op in ("moe_fixed", "gemm_wo_fixed") else RATE_RANGE


@dataclass(frozen=True)
class KernelRates:
    """One engine's kernel rates on one GPU generation (1.0 where nothing is recorded)."""

    #: (op, format) → rate relative to the op model.
    rates: dict[tuple[str, str], float] = field(default_factory=dict)
    #: Whether the engine's int4 experts run Marlin's fused MoE (:data:`MARLIN_INT4`).
    int4_marlin: bool = False
    #: Whether the engine's MXFP4 experts run ``triton_kernels``' grouped matmul (:data:`OGS_MXFP4`).
    mxfp4_ogs: bool = False
    #: Whether the engine's per-tensor fp8 and NVFP4 GEMMs get their activations quantized by
    #: the producing kernel (:data:`FUSED_ACTIVATION_QUANT`): no quantization kernel of their own
    #: (:data:`FUSED_QUANT_PRECISIONS`).  The step-time model clears it for a checkpoint with
    #: block-scaled fp8.
    act_quant_fused: bool = False
    #: The largest query-head group the engine's decode-attention kernel takes (0: any);
    #: larger groups run one work unit per query head (:data:`DECODE_HEAD_GROUP_MAX`).
    decode_head_group_max: int = 0
    #: Whether the engine's prefill attention packs a KV head's query heads into one query
    #: block's rows (:data:`PACK_GQA_PREFILL`).
    prefill_pack_gqa: bool = False
    #: Whether the checkpoint's fp8 experts carry one scale per tensor (ModelOpt FP8, online fp8
    #: quantization) rather than 128-wide blocks (DeepSeek's, Qwen's FP8 releases): the engines
    #: run them through other fused-MoE kernels, whose rates are recorded under ``fp8_tensor``
    #: (an engine with none keeps its fp8 rates).  The step-time model sets it for an fp8
    #: checkpoint without block scales (``ModelArch.fp8_block_scales``).
    fp8_per_tensor: bool = False

    def prefill_attention(self, kind: str) -> float:
        """``kind``: ``mla``, ``gqa`` (softmax attention with grouped key/value heads) or
        ``gqa_window`` (its sliding-window kernel: the engines run windowed prefill through other
        kernels or code paths — TensorRT-LLM's runs 12-39% slower per computed key block than its
        full-attention kernel (Blackwell, Hopper); SGLang's and vLLM's FlashAttention-3 and vLLM's
        Blackwell kernel need no rate of their own, or about their full-attention one)."""
        return self.rates.get(("prefill_attention", kind), 1.0)

    def prefill_attention_fixed(self, kind: str) -> float:
        """The same kernel's fixed work per thread block (query load, pipeline fill, final rescale
        and output store: ``kernels.ATTN_CTA_OVERHEAD_BLOCKS`` key blocks, a time per SM), a factor
        fitted with :meth:`prefill_attention` on the context tables: a persistent kernel that
        loads its next tile while it finishes the last (FlashAttention-3's tile scheduler) hides
        part of it; what short and long chunks are bound by."""
        return self.rates.get(("prefill_attention_fixed", kind), 1.0)

    def decode_attention_fixed(self, kind: str, kv_bytes):
        """The same op's fixed cost, a factor on its kernel count (``kernels.ATTN_KERNELS``): its
        rotary, cache-write, metadata and combine kernels as the engine runs them for the cache's
        format (SGLang on Blackwell quantizes the query and the new KV for an fp8 cache: 16.6 us
        where bf16 takes 10.4 on B200; its Hopper decode op is shorter than five kernels)."""
        return self._per_format("decode_attention_fixed", kind, kv_bytes)

    def _per_format(self, op: str, kind: str, kv_bytes):
        bf16 = self.rates.get((op, kind), 1.0)
        fp8 = self.rates.get((op, kind + "_fp8"), 1.0)
        if bf16 == fp8:
            return bf16
        import numpy as np

        return np.where(np.asarray(kv_bytes, float) < 2.0, fp8, bf16)

    def decode_attention(self, kind: str, kv_bytes):
        """``kind``: ``gqa`` or ``mla`` decode attention over a KV cache of ``kv_bytes`` per element
        (an fp8 cache, below 2 bytes, takes the ``<kind>_fp8`` rate): the rate the engine's kernel
        streams the cache at, relative to ``AnalyticParams.attn_decode_mem_eff`` (capped by the
        GPU's ceiling); the op model keeps the stream within the HBM's nominal bandwidth.  An fp8
        cache is its own format: FlashAttention-3's decode on Hopper (SGLang, vLLM) takes about
        as long over an fp8 cache as over a bf16 one, where TensorRT-LLM's runs it at half the
        bytes' time.  Works on arrays of ``kv_bytes``."""
        return self._per_format("decode_attention", kind, kv_bytes)

    def moe(self, dtype: str, kernel: str | None = None) -> float:
        """The engine's fused-MoE grouped GEMMs with ``dtype`` expert weights: their math
        (``kernel``: the kernel path, :meth:`_moe_rate`)."""
        return self._moe_rate("moe", dtype, kernel)

    def moe_stream(self, dtype: str, kernel: str | None = None) -> float:
        """The same kernels' expert-weight streaming, which decode-sized MoE is bound by."""
        return self._moe_rate("moe_stream", dtype, kernel)

    def moe_fixed(self, dtype: str, kernel: str | None = None) -> float:
        """The same kernels' fixed cost (routing, sorting, permutation, launches): a factor on
        their kernel count (``kernels.MOE_KERNELS``), what a handful of tokens is bound by."""
        return self._moe_rate("moe_fixed", dtype, kernel)

    def moe_masked(self, dtype: str, kernel: str | None = None) -> float:
        """The same kernels' traffic per masked (remote-expert) slot of their input."""
        return self._moe_rate("moe_masked", dtype, kernel)

    def moe_marlin(self, dtype: str, kernel: str | None = None) -> bool:
        """Whether these experts run Marlin's fused MoE (its row blocks, ``moe_row_blocks.marlin_row_block``):
        the ``marlin`` path, or int4 experts of an engine whose int4 runs Marlin."""
        return kernel == "marlin" or (kernel is None and self.int4_marlin and _format(dtype) == "int4")

    def moe_ogs(self, dtype: str, kernel: str | None = None) -> bool:
        """Whether these experts run ``triton_kernels``' grouped matmul (its row blocks,
        ``moe_row_blocks.ogs_row_block``): MXFP4 experts of such an engine on its default path."""
        return self.mxfp4_ogs and kernel is None and _format(dtype) == "mxfp4"

    def _moe_rate(self, op: str, dtype: str, kernel: str | None = None) -> float:
        """A fused-MoE rate: per-tensor fp8 experts at the engine's per-tensor kernels' rate where
        its tables measure them, else at its fp8 MoE kernels' (measured on block-scaled weights).

        ``kernel``: the fused-MoE kernel path (:data:`MOE_KERNEL_PATHS`) where the engine runs this
        model's experts through another kernel than the one its rates for the format describe
        (:data:`MOE_DEFAULT_PATH`): that path's own rates (format ``<format>@<path>``) where its
        tables measure them; Marlin's are the engine's int4 rates where its int4 experts run
        Marlin (the same kernel, another 4-bit weight type); else the format's."""
        fmt = _format(dtype)
        if fmt == "fp8" and self.fp8_per_tensor and ((op, "fp8_tensor") in self.rates
                                                     or (op, f"fp8_tensor@{kernel}") in self.rates):
            fmt = "fp8_tensor"
        if kernel is not None:
            if (op, f"{fmt}@{kernel}") in self.rates:
                return self.rates[(op, f"{fmt}@{kernel}")]
            if kernel == "marlin" and self.int4_marlin:
                return self.rates.get((op, "int4"), 1.0)
        return self.rates.get((op, fmt), 1.0)

    def gemm_quant(self, dtype: str) -> float:
        """The engine's activation-quantization op before a dense GEMM with ``dtype`` weights: a
        factor on its fixed cost beyond the kernel latency (``GPUSpec.quant_op_latency_us``)."""
        return self.rates.get(("gemm_quant", _format(dtype)), 1.0)

    def gemm_wo(self, dtype: str) -> float:
        """The engine's weight-only (mixed-input) dense GEMM with ``dtype`` weights, dequantized to
        bf16 in the kernel: a factor on its math rate."""
        return self.rates.get(("gemm_wo", _format(dtype)), 1.0)

    def gemm_wo_fixed(self, dtype: str) -> float:
        """The same op's fixed cost, a factor on its one kernel's latency (what a few rows of a
        small matrix are bound by)."""
        return self.rates.get(("gemm_wo_fixed", _format(dtype)), 1.0)

    def linear_attn(self) -> float:
        """The engine's chunked gated-delta (linear attention) prefill kernel: its math."""
        return self.rates.get(("linear_attn", "gdn"), 1.0)

    def linear_attn_chain(self) -> float:
        """The same kernel's chunk-to-chunk state passing: a factor on its per-token latency
        (``AnalyticParams.linear_attn_chain_s``)."""
        return self.rates.get(("linear_attn_chain", "gdn"), 1.0)

    def linear_attn_fixed(self) -> float:
        """The same kernel's fixed cost, a factor on its kernel count (``LINEAR_ATTN_KERNELS``)."""
        return self.rates.get(("linear_attn_fixed", "gdn"), 1.0)


def _format(dtype: str) -> str:
    d = dtype.lower()
    return "fp4" if d == "nvfp4" else d


NO_RATES = KernelRates()


@lru_cache(maxsize=1)
def _table() -> dict[tuple[str, int], dict[tuple[str, str], float]]:
    where = str(RATES_FILE)
    doc = safe_load(RATES_FILE.read_text()) or {}
    out: dict[tuple[str, int], dict[tuple[str, str], float]] = {}
    for i, e in enumerate(doc.get("rates") or []):
        at = f"{where}: rates[{i}]"
        try:
            engine, major, op, fmt, rate = e["engine"], int(e["cuda_major"]), e["op"], e["format"], float(e["rate"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{at}: expected engine, cuda_major, op, format and rate ({exc})") from None
        base, _, path = str(fmt).partition("@")
        if op not in OPS or base not in OPS[op] or (path and (not op.startswith("moe") or path not in MOE_KERNEL_PATHS)):
            raise ConfigError(f"{at}: op {op!r} / format {fmt!r}; expected one of {OPS}")
        lo, hi = rate_range(op)
        if not lo <= rate <= hi:
            raise ConfigError(f"{at}: rate {rate} outside {(lo, hi)}")
        out.setdefault((engine, major), {})[(op, fmt)] = rate
    return out


def kernel_rates(engine: str, gpu) -> KernelRates:
    """The rates of ``engine``'s kernels on ``gpu`` (:data:`NO_RATES` for a GPU of another vendor,
    an engine or generation no table measured)."""
    major = getattr(gpu, "cuda_major", None)
    if major is None:
        return NO_RATES
    found = _table().get((engine, major))
    fused = engine in FUSED_ACTIVATION_QUANT
    group = DECODE_HEAD_GROUP_MAX.get(engine, 0)
    pack = (engine, major) in PACK_GQA_PREFILL
    if not found and not fused and not group and not pack:
        return NO_RATES
    return KernelRates(dict(found or {}), int4_marlin=(engine, major) in MARLIN_INT4,
                       mxfp4_ogs=(engine, major) in OGS_MXFP4, act_quant_fused=fused,
                       decode_head_group_max=group, prefill_pack_gqa=pack)
