"""servesim's op model against aiconfigurator-core's measured per-kernel tables.

Run: PYTHONPATH=src python benchmarks/bench_kernels.py [--rows 300] [--json FILE] [--by-gpu]

For every GPU system the package ships that servesim knows (NVIDIA: H100, H200, B200, B300,
GB200, GB300, A100, L40S), every serving framework's tables of each kind, every
precision and shape any of their versions measured, each at the newest version that measured it
(:func:`table_frames`; at most ``--rows`` rows per table and op class, drawn with a
fixed seed), the same op is priced with :class:`servesim.perf.kernels.OpModel` at the
default :class:`~servesim.perf.analytic_params.AnalyticParams` (the uncalibrated physics), and the
relative error ``predicted / measured − 1`` is summarised per op class: count, median and
mean |error|, signed median (bias: > 0 means servesim is too slow).

Op classes (the table each comes from):

- ``gemm/<precision>``: gemm_perf (m × n × k, bf16 / fp8 / fp8 block-scaled / nvfp4 / ...);
- ``attn_prefill``, ``attn_prefill_window``: context_attention_perf (no cached prefix in the
  tables), full and sliding-window;
- ``attn_decode``, ``attn_decode_window``: generation_attention_perf (batch × context);
- ``attn_prefill_fallback``, ``attn_decode_fallback``: the rows of those two tables measured on an
  engine's Triton fallback kernels (:data:`FALLBACK_ATTENTION`: the shapes SGLang's and vLLM's
  main backends do not take; 1.2-2.7x slower than the main backend where both are measured), full
  and windowed together: reported, not a target — the op model prices the tensor-core flash kernels;
- ``mla_prefill``, ``mla_decode``: context_mla_perf / generation_mla_perf (DeepSeek shapes);
  ``mla_prefill_fallback``, ``mla_decode_fallback``: their Triton rows (SGLang's L40S tables: Ada
  has none of the FlashMLA / FlashAttention-3 / trtllm-gen kernels the op model prices);
- ``moe/<precision>``: moe_perf, balanced routing (``moe_skewed`` for power-law routing:
  reported, not a target — servesim assumes uniform routing), each row priced as the collectors
  ran it (:func:`balanced_rank0_experts`: rank 0's experts the balanced routing touches;
  :func:`moe_row_kwargs`: the whole batch handed to every expert-parallel rank, the
  activations' format, gated or not, per-tensor fp8, the kernel path its kernel source names);
  ``moe_path/<precision>@<path>``: the rows of ``moe/<precision>`` run on a kernel path other than
  the engine's default for the format (``engine_kernels.MOE_DEFAULT_PATH``), also reported on their
  own (each path is priced with its own rates); ``moe_excluded/<name>``: rows that do not
  measure what serving runs (:data:`MOE_EXCLUDED`: SGLang's Marlin int4 MoE under expert
  parallelism, which computes the masked slots as rows of expert 0; vLLM 0.24's per-tensor fp8
  MoE on Hopper through FlashInfer's CUTLASS MoE, 5-7x the same kernel's time in TensorRT-LLM's
  table), reported, not a target;
- ``allreduce_custom``: the engines' custom all-reduce under CUDA graphs (``OpModel.all_reduce``),
  also by message size (``allreduce_custom/<2MB``, ``/2-70MB``, ``/>70MB``);
- ``nccl/<op>``: NCCL all_reduce / all_gather / reduce_scatter / alltoall (``OpModel.nccl``);
- ``gdn/<phase>``: gated-DeltaNet linear-attention kernels (recurrent update / chunked).

Measurement hygiene: a GEMM table whose fastest row takes longer than ``HOST_BOUND_KERNELS``
(10) of the GPU's kernel latencies (``GPUSpec.kernel_latency_us``, its shortest measured GEMM)
times the op's host-side work, not its kernels: no GEMM op in these tables launches more than
five kernels (TensorRT-LLM's dynamic per-tensor fp8 op: memset, absolute maximum, quantization,
scale cast, GEMM; ``kernels.DYNAMIC_SCALE_KERNELS``), so a floor of twice that cannot be GPU work.
In such a table a row counts toward its kernel class only when the floor is at most
``HOST_BOUND_SHARE`` (10%, the accuracy the kernel classes are held to) of its time, whether the
host cost overlaps the kernels or adds to them; the other rows are reported as
``host_bound/gemm/<precision>`` (counted, never dropped).  :func:`host_bound_rows` applies the rule
from each table's own floor.  The one table it flags is vLLM 0.24.0's block-fp8 op, which the
collector times without CUDA graphs (``use_cuda_graph=False`` for ``fp8_block`` in aiconfigurator's
collector/vllm/collect_gemm.py) and runs through vLLM's Python dispatch and per-token-group
activation quantization: floors of 55 us (H100 / H200), 155 us (B200 / B300), 245 us (GB200 /
GB300) and 285 us (L40S) at ``m=1, n=k=128``, where the same DeepGEMM kernel in TensorRT-LLM's and
SGLang's tables takes 4-6 us.  Above ~3x the floor the vLLM rows match TensorRT-LLM's DeepGEMM rows
of the same shape to a few percent on H100 (host time overlapped by longer kernels); on B200 they
keep ~55 us over them until ~10x the floor.  Rows priced with the op path the table measures:
TensorRT-LLM's per-tensor fp8 table derives its activation scale at run time
(:data:`DYNAMIC_SCALE_TABLES`, ``OpModel.gemm(dynamic_scale=True)``).

Without aiconfigurator-core installed the script says so and exits 2.
"""

from __future__ import annotations

import argparse
import math
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from servesim.hardware import load_gpu
from servesim.hardware.gpu import NCCL_OPS
from servesim.perf.analytic_params import AnalyticParams
from servesim.perf.engine_kernels import NO_RATES, kernel_rates
from servesim.perf.kernels import OpModel

#: aiconfigurator-core system → servesim GPU.
SYSTEMS = {"h100_sxm": "h100_sxm", "h200_sxm": "h200_sxm", "b200_sxm": "b200_sxm", "b300_sxm": "b300_sxm",
           "gb200": "gb200", "gb300": "gb300", "a100_sxm": "a100_80gb", "l40s": "l40s"}
#: table quant mode → servesim weight precision.
GEMM_DTYPES = {"bfloat16": "bf16", "float16": "bf16", "fp8": "fp8", "fp8_block": "fp8", "fp8_ootb": "fp8",
               "nvfp4": "nvfp4", "mxfp4": "mxfp4", "int4_wo": "int4",
               "w4a16_mxfp4": "mxfp4", "w4a8_mxfp4_mxfp8": "mxfp4", "w4a16_mxfp4_cutlass": "mxfp4",
               "w4a8_mxfp4_mxfp8_trtllm": "mxfp4", "fp8_static": "fp8", "int8_wo": "int8_wo"}
KV_BYTES = {"bfloat16": 2.0, "float16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "int8": 1.0}
NCCL_BYTES = {"half": 2.0, "int8": 1.0, "bfloat16": 2.0, "float": 4.0}
#: Kernel sources of the attention tables that are an engine's portable fallback, not the backend
#: it serves with on Hopper or Blackwell: SGLang's and vLLM's Triton attention, measured for the
#: shapes their main backend does not take (head sizes 64 / 192 / 256 / 512, some windows), and SGLang's MLA on L40S.  On the shapes SGLang's Blackwell tables measure with both (B200, GB200):
#: Triton prefill takes a median 2.7x TensorRT-LLM's FMHA time (2,584 shapes), Triton decode 1.2x
#: (quartiles 0.8-2.3x, 2,908 shapes).  The op model prices the kernels an engine serves with, so
#: these rows are reported as their own classes (``attn_prefill_fallback``, ``attn_decode_fallback``,
#: windowed rows included), never mixed into the attention classes and never dropped; the
#: engine-rate fit (fit_kernel_ceilings.py) leaves them out the same way.
FALLBACK_ATTENTION = "triton"
# DeepSeek-V3 MLA dimensions (the only MLA model the tables measure)
MLA = dict(qk_nope=128, qk_rope=64, v_dim=128, kv_lora=512)


def _version_key(v: str) -> tuple:
    import re

    return tuple(int(x) if x.isdigit() else -1 for x in re.findall(r"\d+|[a-z]+", v))


def _table_versions(root: Path, system: str, names: tuple[str, ...] | None = None) -> dict:
    """(backend, table name) → its files as ``(version key, version, path)``, newest first (equal
    versions in path order), for every table kind and framework of a system (``names``: only
    these tables), in sorted key order."""
    files: dict[tuple[str, str], list[tuple[tuple, str, Path]]] = {}
    for f in sorted((root / system).glob("*/*/*/*.parquet")):
        backend, version, name = f.parts[-3], f.parts[-2], f.stem
        if names is None or name in names:
            files.setdefault((backend, name), []).append((_version_key(version), version, f))
    for versions in files.values():
        versions.sort(key=lambda v: v[0], reverse=True)
    return dict(sorted(files.items()))


def table_files(root: Path, system: str) -> list[tuple[str, str, Path]]:
    """(backend, table name, newest file) for every table kind and framework of a system."""
    return [(b, n, versions[0][2]) for (b, n), versions in _table_versions(root, system).items()]


def _precision_columns(df) -> list[str]:
    """A table's precision columns (``gemm_dtype``, ``moe_dtype``, ``kv_cache_dtype``, ...)."""
    return [c for c in df.columns if c.endswith("_dtype")]


def table_frames(root: Path, system: str, names: tuple[str, ...] | None = None) -> list[tuple[str, str, object]]:
    """(backend, table name, rows) for every table kind and framework of a system: each
    precision the table's versions measured, from the newest version that measured it (rows
    with a positive latency, each with its ``version``; ``names``: only these tables).

    A newer engine version's collector does not always re-measure every precision an older one
    did (TensorRT-LLM 1.3.0rc23's B200 MoE table holds MXFP4 rows only, rc20's bf16, fp8 and
    NVFP4 too): the newest file alone would drop whole precisions from the comparison and from
    the engine-rate fit.  One version per precision keeps each precision's rows one kernel
    generation (an older version's other shapes of a precision a newer one measured are left
    out).  A table without precision columns comes from its newest version."""
    import pandas as pd
    import pyarrow.parquet as pq

    out = []
    for (backend, name), versions in _table_versions(root, system, names).items():
        frames, taken, cols = [], None, None
        for _, version, f in versions:
            df = pq.read_table(f).to_pandas()
            df = df[df.latency > 0] if "latency" in df else df
            if cols is None:
                cols = _precision_columns(df)
            elif not cols or any(c not in df.columns for c in cols):
                continue
            df = df.assign(version=version)
            if cols:
                key = pd.MultiIndex.from_frame(df[cols].astype(str))
                if taken is not None:
                    df, key = df[~key.isin(taken)], key[~key.isin(taken)]
                taken = key.unique() if taken is None else taken.append(key.unique())
            frames.append(df)
        frames = [f for f in frames if len(f)]
        if frames:
            out.append((backend, name, pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]))
    return out


def _sample(df, rows: int, seed: int = 0):
    return df if len(df) <= rows else df.sample(rows, random_state=seed)


#: A GEMM table is host-bound when its fastest row takes longer than this many kernel latencies
#: (twice the most kernels any GEMM op in the tables launches; module docstring).
HOST_BOUND_KERNELS = 10
#: In a host-bound table a row measures its kernel only when the table's floor is at most this
#: share of its time (the kernel classes' accuracy target).
HOST_BOUND_SHARE = 0.1
#: (engine, table precision) GEMM tables whose op derives its per-tensor activation scale at run
#: time: TensorRT-LLM's fp8 collector loads no ``input_scale``, so its FP8 linear layer quantizes
#: dynamically (memset, absolute-maximum pass, quantization, scale cast before the cuBLASLt GEMM).
DYNAMIC_SCALE_TABLES = {("trtllm", "fp8")}


def host_bound_rows(latency, table_floor, kernel_latency_us: float) -> np.ndarray:
    """Which rows (``latency``, ms) of a GEMM table with fastest row ``table_floor`` (ms) measure
    host overhead rather than the kernel: none unless the floor exceeds :data:`HOST_BOUND_KERNELS`
    kernel latencies; then those whose time the floor could be more than :data:`HOST_BOUND_SHARE` of."""
    lat = np.asarray(latency, float)
    if table_floor * 1e3 <= HOST_BOUND_KERNELS * kernel_latency_us:
        return np.zeros(lat.shape, bool)
    return lat * HOST_BOUND_SHARE < table_floor


# ------------------------------------------------------------ per table: (class, pred, meas)
def _gemm(ops: OpModel, df, rows):
    backend = df.attrs.get("backend", "")
    for dt, g in df.groupby("gemm_dtype"):
        prec = GEMM_DTYPES.get(dt)
        if prec is None:
            continue
        floor = float(g.latency.min())
        g = _sample(g, rows)
        pred = ops.gemm(g.m.values, g.n.values, g.k.values, prec,
                        dynamic_scale=(backend, dt) in DYNAMIC_SCALE_TABLES)
        host = host_bound_rows(g.latency.values, floor, ops.gpu.kernel_latency_us)
        for cls, sel in ((f"gemm/{dt}", ~host), (f"host_bound/gemm/{dt}", host)):
            if sel.any():
                yield cls, pred[sel], g.latency.values[sel]


def _fallback(df):
    """Rows of an attention table measured on an engine's portable Triton fallback
    (:data:`FALLBACK_ATTENTION`)."""
    return df.kernel_source.astype(str).str.contains(FALLBACK_ATTENTION) if "kernel_source" in df \
        else np.zeros(len(df), bool)


def _sampled_groups(df, rows: int, name: str, windows: bool = False):
    """(class, sampled rows) of an attention table, empty classes left out: the rows of the
    serving kernel as ``name`` (with ``windows``, full attention as ``name`` and sliding windows
    as ``<name>_window``) and the Triton fallback's as ``<name>_fallback`` (:func:`_fallback`)."""
    fb = _fallback(df)
    df, fall = df[~fb], df[fb]
    groups = ((name, df),)
    if windows:
        w = df.window_size if "window_size" in df else 0 * df.isl
        groups = ((name, df[w == 0]), (f"{name}_window", df[w > 0]))
    for cls, g in (*groups, (f"{name}_fallback", fall)):
        g = _sample(g, rows)
        if len(g):
            yield cls, g


def _context_attention(ops, df, rows):
    for name, g in _sampled_groups(df, rows, "attn_prefill", windows=True):
        win = g.window_size.values if "window_size" in g else 0
        kvb = g.kv_cache_dtype.map(KV_BYTES).fillna(2.0).values
        yield name, ops.attention_prefill(g.batch_size.values, g.isl.values, 0, g.num_heads.values,
                                          g.num_key_value_heads.values, g.head_dim.values, win, kvb), g.latency.values


def _generation_attention(ops, df, rows):
    for name, g in _sampled_groups(df, rows, "attn_decode", windows=True):
        win = g.window_size.values if "window_size" in g else 0
        kvb = g.kv_cache_dtype.map(KV_BYTES).fillna(2.0).values
        ctx = g.isl.values + g.step.values
        yield name, ops.attention_decode(g.batch_size.values, ctx, g.num_heads.values,
                                         g.num_key_value_heads.values, g.head_dim.values, win, kvb), g.latency.values


def _context_mla(ops, df, rows):
    for name, g in _sampled_groups(df, rows, "mla_prefill"):
        kvb = g.kv_cache_dtype.map(KV_BYTES).fillna(2.0).values
        yield name, ops.mla_prefill(g.batch_size.values, g.isl.values, 0, g.num_heads.values,
                                    kv_bytes=kvb, **MLA), g.latency.values


def _generation_mla(ops, df, rows):
    for name, g in _sampled_groups(df, rows, "mla_decode"):
        kvb = g.kv_cache_dtype.map(KV_BYTES).fillna(2.0).values
        ctx = g.isl.values + g.step.values
        yield name, ops.mla_decode(g.batch_size.values, ctx, g.num_heads.values, qk_rope=MLA["qk_rope"],
                                   kv_lora=MLA["kv_lora"], kv_bytes=kvb), g.latency.values


def _moe(ops, df, rows):
    backend = df.attrs.get("backend")
    skew = df.distribution.astype(str).str.startswith("power_law")
    excluded = moe_excluded(df, ops.gpu.cuda_major)
    for dt, g0 in df[~skew & (excluded == "")].groupby("moe_dtype"):
        prec = GEMM_DTYPES.get(dt)
        if prec is None:
            continue
        g0 = _sample(g0, rows)
        name, pred, meas = next(_moe_class(ops, f"moe/{dt}", g0, prec, balanced=True, backend=backend))
        yield name, pred, meas
        # the rows of a kernel path other than the engine's default for the format, also on their own
        paths = np.array([str(moe_kernel_path(k, dt, backend, ops.gpu.cuda_major)) for k in
                          (g0.kernel_source if "kernel_source" in g0 else [""] * len(g0))])
        for path in sorted(set(paths) - {"None"}):
            yield f"moe_path/{dt}@{path}", pred[paths == path], meas[paths == path]
    for dt, g0 in df[skew & (excluded == "")].groupby("moe_dtype"):
        prec = GEMM_DTYPES.get(dt)
        if prec is not None:
            yield from _moe_class(ops, "moe_skewed", _sample(g0, rows // 4), prec, balanced=False, backend=backend)
    for skewed in (False, True):  # both routings of the excluded rows, under their own class
        sel = (skew if skewed else ~skew) & (excluded != "")
        for (why, dt), g0 in df[sel].groupby([excluded[sel], "moe_dtype"]):
            prec = GEMM_DTYPES.get(dt)
            if prec is not None:
                yield from _moe_class(ops, f"moe_excluded/{why}", _sample(g0, rows // 4 if skewed else rows), prec,
                                      balanced=not skewed, backend=backend)


#: moe_perf rows that do not measure what serving runs, reported under ``moe_excluded/<name>``
#: and left out of the fits (benchmarks/fit_kernel_ceilings.py): name → (kernel source, the CUDA
#: major versions it applies on, whether only under expert parallelism).
#:
#: - ``sglang_marlin_ep``: SGLang's Marlin int4 MoE under expert parallelism.  The collector
#:   hands rank 0 the whole batch with remote experts' ids masked to −1 and, because Marlin's
#:   kernel indexes the weights by expert id unchecked, clamps them to expert 0 (its weight 0):
#:   every masked slot is computed as a row of local expert 0.  Serving maps remote experts out.
#:   The tables show it: at 256+ tokens EP 2 costs 0.89 of EP 1 (median), where every other
#:   kernel costs 0.5-0.7.
#: - ``vllm_fp8_cutlass_hopper``: vLLM 0.24's per-tensor fp8 (ModelOpt) MoE on H100 / H200, run
#:   through FlashInfer's CUTLASS MoE.  It measures 5-7x the same op's time in TensorRT-LLM's
#:   table, which runs the same CUTLASS MoE kernel (H200, hidden 4096, intermediate 1536, top-8
#:   of 128, one GPU: 0.33 / 4.2 / 8.3 ms at 1 / 64 / 8192 tokens against 0.067 / 0.60 / 2.45),
#:   and in vLLM 0.19's table (its fused MoE: 0.061 / 0.62 / 2.96 ms), and ~250 us per touched
#:   expert at 64 tokens (a tenth of the HBM rate), while the same kernel with block-scaled
#:   weights measures at the op model (14.6% median) and vLLM 0.24's per-tensor fp8 on B200
#:   (FlashInfer's TensorRT-LLM kernel, 0.36 ms at 64 tokens) matches TensorRT-LLM's (0.38).
#:   Fitted, its rates (a 6.5x fixed cost, weights streamed at 0.21x) made vLLM's per-tensor fp8
#:   MoE on Hopper 4x slower than its block-fp8 MoE.
MOE_EXCLUDED = {"sglang_marlin_ep": ("sglang_marlin_moe", None, True),
                "vllm_fp8_cutlass_hopper": ("vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts", (9,), False)}


def moe_excluded(df, cuda_major=None):
    """Per moe_perf row: the :data:`MOE_EXCLUDED` name it falls under, "" for the rest
    (``cuda_major``: the GPU generation the table was measured on)."""
    import pandas as pd

    why = pd.Series("", index=df.index)
    src = df.kernel_source.astype(str) if "kernel_source" in df else pd.Series("", index=df.index)
    for name, (source, majors, ep_only) in MOE_EXCLUDED.items():
        if majors is not None and cuda_major not in majors:
            continue
        hit = src == source
        if ep_only:
            hit &= df.moe_ep_size > 1
        why[hit] = name
    return why


def _moe_class(ops, name, g, prec, balanced, backend=None):
    """Balanced tables spread every token's k experts evenly: ``min(E, tokens·k)`` experts
    touched; skewed (power-law) ones are priced as uniform random routing.  Each row as the
    collectors run it (:func:`moe_row_kwargs`; ``backend``: the engine whose table it is, whose
    kernel path the row's kernel source names)."""
    out = []
    for r in g.itertuples():
        touched = balanced_rank0_experts(r.num_tokens, r.num_experts, r.topk, r.moe_ep_size) if balanced else None
        kw = moe_row_kwargs(r, backend, ops.gpu.cuda_major)
        per_tensor = kw.pop("fp8_per_tensor")
        row_ops = OpModel(ops.gpu, ops.p, replace(ops.rates, fp8_per_tensor=True)) if per_tensor else ops
        out.append(float(row_ops.moe(r.num_tokens, r.hidden_size, r.inter_size, r.topk, r.num_experts,
                                     r.moe_tp_size, r.moe_ep_size, prec, touched=touched, **kw)))
    yield name, np.asarray(out), g.latency.values


def balanced_rank0_experts(tokens: int, experts: int, topk: int, ep: int) -> float:
    """Experts of rank 0 (the first ``experts/ep``) that the collectors' balanced routing touches.

    aiconfigurator's ``balanced_logits`` gives token ``i`` the experts ``i + j·s`` (``s = ⌈E/k⌉``,
    ``j < k``, modulo ``E``) once there are at least ``s`` tokens — every expert touched — and
    ``⌊i·s/T⌋ + j·s`` below that: each token one expert in each of the ``k`` strides.  A rank's
    first experts then get their share of the pairs, but a handful of tokens touches a whole
    expert of rank 0, not ``tokens·k/ep`` of one (one token over 64 ranks: 1, not 0.125)."""
    local = experts // ep
    s = math.ceil(experts / topk)
    if tokens >= s:
        return float(min(local, experts))
    i = np.arange(tokens)[:, None]
    e = np.floor((i * s / tokens + np.arange(topk)[None, :] * s) % experts).astype(int)
    return float(len(np.unique(e[e < local])))


#: TensorRT-LLM's tables also time squared-ReLU experts (``*_nongated``: NVIDIA's Nemotron-H, 512
#: experts, top 22, up and down projections only), which no model servesim bundles has.  Where the
#: table also times the format's default path on gated experts (``MOE_DEFAULT_PATH``: Blackwell
#: NVFP4, whose gated rows run the TRTLLM backend's min-latency kernels), the squared-ReLU rows are
#: their own path, ``nongated``, with rates of their own: fitted together, the engine's NVFP4 rates
#: priced its gated decode-sized MoE (DeepSeek's, Qwen's) 1.3x slow and the squared-ReLU rows
#: 0.5-0.7x fast (B200, up to 64 tokens).  Where they are the format's only rows (Hopper's bf16 and
#: per-tensor fp8), they stay the engine's measurement of its MoE.
NONGATED = "nongated"
#: kernel-source keywords → fused-MoE kernel path (``engine_kernels.MOE_KERNEL_PATHS``), first match.
MOE_PATH_KEYWORDS = (("marlin", "marlin"), ("cutlass", "cutlass"), ("triton", "triton"), ("deepgemm", "deepgemm"),
                     ("trtllm", "trtllm"),
                     ("torch_flow", "trtllm"), ("cutedsl", "trtllm"))


def moe_kernel_path(kernel_source: str, table_dtype: str, backend: str | None, cuda_major: int | None) -> str | None:
    """The kernel path of a moe_perf row where it is not the one the engine's rates for its format
    describe (``engine_kernels.MOE_DEFAULT_PATH``), else None.  A W4A16 MXFP4 row on Blackwell runs
    the bf16-activation kernel (``trtllm_a16``), not the MXFP8-activation one served there.  An
    engine and format with one path in its tables has no default listed: None."""
    from servesim.perf.engine_kernels import MOE_DEFAULT_PATH

    src = str(kernel_source)
    path = next((p for key, p in MOE_PATH_KEYWORDS if key in src), None)
    fmt = {"bfloat16": "bf16", "fp8_block": "fp8", "fp8": "fp8_tensor", "nvfp4": "fp4", "int4_wo": "int4"}.get(
        table_dtype, "mxfp4" if "mxfp4" in table_dtype else table_dtype)
    if path == "trtllm" and table_dtype.startswith("w4a16") and cuda_major == 10:
        path = "trtllm_a16"
    if path == "marlin" and fmt != "int4":
        return path  # Marlin with other 4-bit weights: the engine's Marlin rates, its row blocks
    default = MOE_DEFAULT_PATH.get((backend, cuda_major, fmt))
    if default is not None and NONGATED in src:
        return NONGATED  # beside the default path's gated rows, squared-ReLU rows are their own (NONGATED)
    return None if default is None or path == default or path is None else path


def moe_row_kwargs(r, backend: str | None = None, cuda_major: int | None = None) -> dict:
    """What a moe_perf row measures beyond its shape (``OpModel.moe``'s keywords):

    - ``slots``: every rank's kernel is handed the whole batch, ``num_tokens × topk`` slots,
      the experts of other ranks masked (aiconfigurator's collectors: SGLang and vLLM pass the
      global routing with remote experts' ids masked, TensorRT-LLM's MoE module routes the
      whole batch and keeps its own experts' rows) — the engines' expert parallelism without
      an all-to-all dispatcher;
    - ``act_dtype``: ``w4a16_*`` rows keep bf16 activations (weight-only kernels);
    - ``gated``: TensorRT-LLM labels its squared-ReLU (Nemotron-H) rows ``*_nongated``;
    - ``fp8_per_tensor``: the ``fp8`` rows are per-tensor-scaled checkpoints (ModelOpt FP8;
      block-scaled ones are ``fp8_block``), run by the engines' per-tensor kernels;
    - ``kernel``: the kernel path the row's kernel source names, where it is not the engine's
      default for the format (:func:`moe_kernel_path`; ``backend``, ``cuda_major``: whose table)."""
    dt = str(r.moe_dtype)
    src = str(getattr(r, "kernel_source", ""))
    return dict(slots=r.num_tokens * r.topk, act_dtype="bf16" if dt.startswith("w4a16") else None,
                gated="nongated" not in src, fp8_per_tensor=dt == "fp8",
                kernel=moe_kernel_path(src, dt, backend, cuda_major))


#: message-size bands the custom all-reduce is also reported in (bytes, upper bounds): decode
#: batches' all-reduces, a prefill chunk's (a 1k-token DeepSeek chunk moves 15 MB), long chunks.
ALLREDUCE_BANDS = ((2e6, "<2MB"), (70e6, "2-70MB"), (float("inf"), ">70MB"))


def _custom_allreduce(ops, df, rows):
    g = df[~df.kernel_source.astype(str).str.contains("eager", case=False)]
    g = _sample(g, rows)
    nbytes = g.message_size.values * 2.0
    pred, meas = ops.all_reduce(nbytes, g.num_gpus.values), g.latency.values
    yield "allreduce_custom", pred, meas
    lo = 0.0
    for hi, band in ALLREDUCE_BANDS:
        m = (nbytes >= lo) & (nbytes < hi)
        lo = hi
        if m.any():
            yield f"allreduce_custom/{band}", pred[m], meas[m]


def _nccl(ops, df, rows):
    for op, g in df.groupby("op_name"):
        if op not in NCCL_OPS:
            continue
        g = _sample(g, rows)
        nbytes = g.message_size.values * g.nccl_dtype.map(NCCL_BYTES).fillna(2.0).values
        yield f"nccl/{op}", ops.nccl(op, nbytes, g.num_gpus.values), g.latency.values


def _gdn(ops, df, rows):
    for kernel, g in df.groupby("kernel_source"):
        if "conv1d" in str(kernel):
            continue  # the short convolution: elementwise-sized, priced with the norms
        g = _sample(g, rows)
        phase = g.phase.iloc[0]
        yield f"gdn/{phase}", gdn_time(ops, g), g.latency.values


def gdn_time(ops, g):
    """Seconds the op model gives each row of one phase of a gated-delta table (each batch's
    sequences ``seq_len`` tokens long)."""
    prefill = g.phase.iloc[0] == "context"
    tokens = g.num_tokens.values if prefill else g.batch_size.values
    return ops.gated_delta(g.batch_size.values, tokens, g.num_v_heads.values, g.head_k_dim.values,
                           g.head_v_dim.values, prefill=prefill, longest=g.seq_len.values if prefill else None)


READERS = {
    "gemm_perf": _gemm, "context_attention_perf": _context_attention,
    "generation_attention_perf": _generation_attention, "context_mla_perf": _context_mla,
    "generation_mla_perf": _generation_mla, "moe_perf": _moe, "custom_allreduce_perf": _custom_allreduce,
    "nccl_perf": _nccl, "gdn_perf": _gdn,
}


def collect(rows: int, params: AnalyticParams | None = None, tables: tuple[str, ...] | None = None,
            systems: tuple[str, ...] | None = None, engine_rates: bool = True) -> list[dict]:
    """Every compared kernel: {cls, gpu, backend, pred_ms, meas_ms} records (``tables``: only
    these table names, e.g. ``("gemm_perf",)``; ``systems``: only these GPU systems;
    ``engine_rates``: price each engine's table with its own kernel rates, perf/engine_kernels.py)."""
    from aiconfigurator_core.sdk import perf_database

    root = Path(perf_database.get_systems_paths()[0]) / "data"
    params = params or AnalyticParams()
    out: list[dict] = []
    for system, gpu_name in SYSTEMS.items():
        if systems is not None and system not in systems:
            continue
        gpu = load_gpu(gpu_name)
        for backend, name, df in table_frames(root, system, tuple(READERS) if tables is None else tables):
            reader = READERS.get(name)
            if reader is None:
                continue
            # each engine's table against the op model as servesim runs it for that engine; a
            # table's quantized GEMM op quantizes its own bf16 input (none is fed fp8 by a
            # fused producer, as TensorRT-LLM serves per-tensor fp8), so it is priced with it
            rates = kernel_rates(backend, gpu) if engine_rates else NO_RATES
            ops = OpModel(gpu, params, replace(rates, act_quant_fused=False))
            df.attrs["backend"] = backend
            with np.errstate(all="ignore"):
                for cls, pred, meas in reader(ops, df, rows):
                    pred = np.asarray(pred, float) * 1e3  # ms, as the tables
                    for pv, mv in zip(pred.tolist(), np.asarray(meas, float).tolist()):
                        if np.isfinite(pv) and mv > 0:
                            out.append(dict(cls=cls, gpu=gpu_name, backend=backend, pred_ms=pv, meas_ms=mv))
    return out


def summarise(records: list[dict], key=("cls",)) -> dict[str, dict]:
    groups: dict[str, list[float]] = {}
    for r in records:
        k = "|".join(str(r[x]) for x in key)
        groups.setdefault(k, []).append(r["pred_ms"] / r["meas_ms"] - 1.0)
    out = {}
    for k, errs in sorted(groups.items()):
        e = np.asarray(errs)
        out[k] = dict(count=int(e.size), median_abs=float(np.median(np.abs(e))), mean_abs=float(np.mean(np.abs(e))),
                      median_signed=float(np.median(e)))
    return out


def _print(title: str, table: dict[str, dict]) -> None:
    print(f"\n{title}")
    print(f"{'class':<44} {'n':>6} {'median|e|':>10} {'mean|e|':>9} {'bias':>8}")
    for k, v in table.items():
        print(f"{k:<44} {v['count']:>6} {100 * v['median_abs']:>9.1f}% {100 * v['mean_abs']:>8.1f}% "
              f"{100 * v['median_signed']:>+7.1f}%")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=300, help="rows per table and op class (fixed-seed sample)")
    ap.add_argument("--json", type=Path, help="write the summaries (and per-GPU breakdown) here")
    ap.add_argument("--by-gpu", action="store_true", help="also print the per-GPU breakdown")
    ap.add_argument("--by-engine", action="store_true", help="also print the per-engine breakdown")
    ap.add_argument("--no-engine-rates", action="store_true",
                    help="price every engine's table with the same op model (no perf/engine_kernels.yaml rates)")
    a = ap.parse_args(argv)
    try:
        import aiconfigurator_core  # noqa: F401
    except ImportError:
        print("bench_kernels: needs aiconfigurator-core (pip install 'servesim[aic]')", file=sys.stderr)
        return 2
    records = collect(a.rows, engine_rates=not a.no_engine_rates)
    by_cls = summarise(records)
    by_gpu = summarise(records, ("cls", "gpu"))
    by_engine = summarise(records, ("cls", "backend"))
    _print("per op class (error = servesim / measured - 1)", by_cls)
    if a.by_gpu:
        _print("per op class and GPU", by_gpu)
    if a.by_engine:
        _print("per op class and engine", by_engine)
    if a.json:
        a.json.write_text(json.dumps({"rows": a.rows, "by_class": by_cls, "by_class_gpu": by_gpu,
                                      "by_class_engine": by_engine}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
