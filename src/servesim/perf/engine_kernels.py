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
efficiency, or for ``moe_stream`` the rate the MoE kernel streams expert weights at (never past
the GPU's measured HBM ceiling), or for ``moe_fixed`` the fused-MoE layer's kernel count (its
routing, sorting and permutation work and launches: what a handful of tokens is bound by), or
for ``moe_masked`` the traffic of a masked slot in its input (a remote expert's, under expert
parallelism without an all-to-all dispatcher: ``kernels.OpModel.moe``; 0 for a kernel that
skips them).  Per-tensor-scaled fp8 experts have rates of their own, format ``fp8_tensor``
(:attr:`KernelRates.fp8_per_tensor`); for
the gated-delta prefill kernel, ``linear_attn`` multiplies its
math rate, ``linear_attn_chain`` its per-token chain latency and ``linear_attn_fixed`` its kernel
count.  1 (no entry) keeps the op model as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from servesim.errors import ConfigError
from servesim.yaml_io import safe_load

RATES_FILE = Path(__file__).with_name("engine_kernels.yaml")
#: Ops a rate can apply to, with the formats each names.
OPS = {"prefill_attention": ("mla", "gqa", "gqa_window"), "moe": ("bf16", "fp8", "fp8_tensor", "fp4", "mxfp4", "int4"),
       "moe_stream": ("bf16", "fp8", "fp8_tensor", "fp4", "mxfp4", "int4"), "moe_fixed": ("bf16", "fp8", "fp8_tensor", "fp4", "mxfp4", "int4"),
       "moe_masked": ("bf16", "fp8", "fp8_tensor", "fp4", "mxfp4", "int4"),
       "linear_attn": ("gdn",), "linear_attn_chain": ("gdn",), "linear_attn_fixed": ("gdn",)}
#: A rate outside this range is a table or fitting error, not a kernel.
RATE_RANGE = (0.1, 3.0)
#: The gated-delta prefill kernel's math rate spans more: vLLM's FlashInfer kernel runs it on
#: tensor cores, at ~7.7 times (Hopper) the rate of the FLA-style Triton kernels the op model's
#: default (``AnalyticParams.linear_attn_eff``) describes.
LINEAR_ATTN_RATE_RANGE = (0.1, 10.0)
#: A fused-MoE layer's fixed cost spans more too: its routing, sorting and permutation kernels
#: and launches take 40-65 us on H200 in vLLM's block-fp8 path (2x ``MOE_KERNELS`` kernel
#: latencies; 2.4x in vLLM's Marlin int4 path on Blackwell; TensorRT-LLM's Hopper MXFP4 path
#: measures 4x under expert parallelism, which the gpt-oss rates leave out).
MOE_FIXED_RATE_RANGE = (0.1, 10.0)
#: A masked slot's traffic (``moe_masked``) may be none at all: a kernel that permutes only its
#: own experts' rows skips them.
MOE_MASKED_RATE_RANGE = (0.0, 3.0)


#: (engine, CUDA major) whose int4 experts run Marlin's fused MoE (kernel sources of the engines'
#: ``int4_wo`` tables: vLLM's compressed-tensors W4A16 Marlin path on Hopper and Blackwell,
#: SGLang's Marlin MoE on Hopper; SGLang on Blackwell runs FlashInfer's TensorRT-LLM MoE instead).
#: Marlin picks its row block by the rows an expert gets (``kernels.marlin_row_block``).
MARLIN_INT4 = frozenset({("vllm", 9), ("vllm", 10), ("sglang", 9)})

#: Engines whose per-tensor fp8 GEMMs take activations already quantized by the kernel that
#: produced them, so such a GEMM runs no quantization kernel of its own.  A per-tensor fp8
#: checkpoint (NVIDIA's ModelOpt exports) carries static input scales, and TensorRT-LLM writes
#: the fp8 copy in the producer's epilogue: its all-reduce fusion ends in residual add, RMSNorm
#: and fp8 quantization (the q/k/v and gate/up inputs), its context attention writes fp8 output
#: (the o-projection's input) and its SwiGLU kernel quantizes what it writes (the down
#: projection's).  Block-scaled fp8 (128-wide groups per token: DeepSeek's, Qwen's FP8 releases)
#: and NVFP4 still run a quantization kernel before the GEMM there, as everything does in SGLang
#: and vLLM; the op model prices it (``GPUSpec.quant_op_latency_us`` plus the copy's traffic).
#: Measured end to end (uncalibrated, InferenceX's TensorRT-LLM Llama-3.1-70B fp8 rows): TPOT
#: +14% / +13% (H200 / B200, median) with the kernel, +10% / +2% without.
FUSED_ACTIVATION_QUANT = frozenset({"trtllm"})


def rate_range(op: str) -> tuple[float, float]:
    """The range a rate of ``op`` must lie in (:data:`RATE_RANGE`, wider for the gated-delta math,
    the fused-MoE fixed cost and its masked slots)."""
    if op == "linear_attn":
        return LINEAR_ATTN_RATE_RANGE
    if op == "moe_masked":
        return MOE_MASKED_RATE_RANGE
    return MOE_FIXED_RATE_RANGE if op == "moe_fixed" else RATE_RANGE


@dataclass(frozen=True)
class KernelRates:
    """One engine's kernel rates on one GPU generation (1.0 where nothing is recorded)."""

    #: (op, format) → rate relative to the op model.
    rates: dict[tuple[str, str], float] = field(default_factory=dict)
    #: Whether the engine's int4 experts run Marlin's fused MoE (:data:`MARLIN_INT4`).
    int4_marlin: bool = False
    #: Whether the engine's per-tensor fp8 GEMMs get their activations quantized by the
    #: producing kernel (:data:`FUSED_ACTIVATION_QUANT`): no quantization kernel of their own.
    #: The step-time model clears it for a checkpoint with block-scaled fp8.
    fp8_act_quant_fused: bool = False
    #: Whether the checkpoint's fp8 experts carry one scale per tensor (ModelOpt FP8, online fp8
    #: quantization) rather than 128-wide blocks (DeepSeek's, Qwen's FP8 releases): the engines
    #: run them through other fused-MoE kernels, whose rates are recorded under ``fp8_tensor``
    #: (an engine with none keeps its fp8 rates).  The step-time model sets it for an fp8
    #: checkpoint without block scales (``ModelArch.fp8_block_scales``).
    fp8_per_tensor: bool = False

    def prefill_attention(self, kind: str) -> float:
        """``kind``: ``mla``, ``gqa`` (softmax attention with grouped key/value heads) or
        ``gqa_window`` (its sliding-window kernel: the engines run windowed prefill through other
        kernels or code paths — TensorRT-LLM's runs 30-40% slower per computed key block than its
        full-attention kernel, vLLM's Blackwell one 20%; SGLang's and vLLM's Hopper
        FlashAttention-3 need no rate of their own)."""
        return self.rates.get(("prefill_attention", kind), 1.0)

    def moe(self, dtype: str) -> float:
        """The engine's fused-MoE grouped GEMMs with ``dtype`` expert weights: their math."""
        return self._moe_rate("moe", dtype)

    def moe_stream(self, dtype: str) -> float:
        """The same kernels' expert-weight streaming, which decode-sized MoE is bound by."""
        return self._moe_rate("moe_stream", dtype)

    def moe_fixed(self, dtype: str) -> float:
        """The same kernels' fixed cost (routing, sorting, permutation, launches): a factor on
        their kernel count (``kernels.MOE_KERNELS``), what a handful of tokens is bound by."""
        return self._moe_rate("moe_fixed", dtype)

    def moe_masked(self, dtype: str) -> float:
        """The same kernels' traffic per masked (remote-expert) slot of their input."""
        return self._moe_rate("moe_masked", dtype)

    def _moe_rate(self, op: str, dtype: str) -> float:
        """A fused-MoE rate: per-tensor fp8 experts at the engine's per-tensor kernels' rate where
        its tables measure them, else at its fp8 MoE kernels' (measured on block-scaled weights)."""
        fmt = _format(dtype)
        if fmt == "fp8" and self.fp8_per_tensor and (op, "fp8_tensor") in self.rates:
            fmt = "fp8_tensor"
        return self.rates.get((op, fmt), 1.0)

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
        if op not in OPS or fmt not in OPS[op]:
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
    if not found and not fused:
        return NO_RATES
    return KernelRates(dict(found or {}), int4_marlin=(engine, major) in MARLIN_INT4,
                       fp8_act_quant_fused=fused)
