"""Set each GPU's kernel ceilings from aiconfigurator-core's measured GEMM and MoE tables.

Run: PYTHONPATH=src python benchmarks/fit_kernel_ceilings.py [--gpus h100_sxm,b200_sxm] [--rows 1500]

The op model (:mod:`servesim.perf.kernels`) runs a GEMM at the precision's peak times an
efficiency capped by ``GPUSpec.achievable[<precision>]``, and streams quantized weights at
``achievable['stream_<format>']`` of the rate it streams bf16 weights.  This script finds, per
GPU, the values that make the op model's GEMM and MoE times match the measured kernels best
(robust least squares on log(predicted / measured), soft-L1 with scale 0.1, so single slow
shapes do not pull the fit) and prints them as YAML for the GPU's file:

- ``bf16`` / ``fp8`` / ``fp4``: compute ceilings, from the GEMMs of that compute precision
  (fp8 and block-scaled fp8 pooled; nvfp4 for fp4), with the op model's fp8 / fp4 GEMMs
  running every output tile's whole K loop on one SM (``kernels.QUANTIZED_SPLIT_K``: the
  engines' quantized kernels do not split K);
- ``stream_fp8`` / ``stream_nvfp4``: quantized-weight streaming, from the same GEMMs (small
  row counts are bound by it);
- ``stream_mxfp4`` / ``stream_int4``: weight-only 4-bit formats, from the MoE tables (the
  only tables that run them at scale) — printed, not shipped: the fit leaves a −20% bias and
  mixes every shape's kernels (gpt-oss's MXFP4 kernels get their own rates per engine, below);
- ``moe_eff_scale`` and ``moe_expert_s`` (``--moe``): one grouped-GEMM efficiency relative to the
  dense GEMMs and the time each touched expert adds to the weight streaming, fitted together over
  every GPU's bf16 / fp8 / block-fp8 / nvfp4 MoE tables (all frameworks), with the GPUs' files
  as they are: the defaults of :class:`~servesim.perf.analytic_params.AnalyticParams`;
- each engine's own kernel rates (``--engine-kernels [--out FILE]``): per engine, CUDA major
  version, op and format, the factor on the op model's compute efficiency that fits that
  engine's tables best (prefill attention, MLA and GQA; fused-MoE grouped GEMMs per expert
  format (per-tensor fp8 apart from block-scaled, ``fp8_tensor``) and kernel path (the rows of a
  path other than the engine's default for the format, ``engine_kernels.MOE_DEFAULT_PATH``, under
  ``<format>@<path>``; Marlin with MXFP4 weights takes the engine's Marlin int4 rates, no fit of
  its own), with factors on their weight streaming, fixed cost and masked expert-parallel slots; MXFP4 from the gpt-oss-shaped rows
  of the kernels each engine serves gpt-oss with, :func:`_gptoss_mxfp4_rows`; the chunked
  gated-delta prefill kernel's math, chain latency and fixed cost, :data:`LINEAR_ATTN_RATES`; the
  fixed cost of the engine's NVFP4 activation quantization before a dense GEMM, :data:`GEMM_QUANT_RATES`;
  the math and fixed cost of its weight-only (int8 / int4) dense GEMMs, :data:`GEMM_WO_RATES`;
  decode attention's KV stream rate and fixed cost per cache format, GQA and MLA, bf16 and fp8,
  :data:`DECODE_RATES`, from the generation tables without their Triton fallback rows),
  written as ``src/servesim/perf/engine_kernels.yaml`` (perf/engine_kernels.py).

These are per-kernel measurements (physics), not end-to-end results: nothing of
calibration.csv enters.  Excluded (:data:`EXCLUDED`), with the reason: vLLM's block-scaled fp8
GEMM op on Blackwell and Hopper (its table has a 50-220 µs floor at every shape: the op runs an
un-captured DeepGEMM path with per-call scale-layout work that serving under CUDA graphs does
not pay); TensorRT-LLM's per-tensor fp8 op (its collector loads no ``input_scale``, so
TensorRT-LLM's FP8 linear quantizes activations dynamically: an amax pass over the whole tensor
before the quantization and the cuBLASLt GEMM, a 12 µs floor on every GPU from L40S to GB300;
the per-tensor checkpoints served, ModelOpt FP8, carry static input scales and pay one
quantization kernel); the MoE rows of ``bench_kernels.MOE_EXCLUDED`` (SGLang's Marlin int4 MoE
under expert parallelism, whose collector computes every masked slot as a row of expert 0;
vLLM 0.24's per-tensor fp8 MoE on Hopper through FlashInfer's CUTLASS MoE, 5-7x the same
kernel's time in TensorRT-LLM's table).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernels import (FALLBACK_ATTENTION, GEMM_DTYPES, KV_BYTES, MLA, SYSTEMS, _moe_class, gdn_time,  # noqa: E402
                           moe_excluded, moe_kernel_path, table_frames)

from servesim.hardware import load_gpu  # noqa: E402
from servesim.perf.analytic_params import AnalyticParams  # noqa: E402
from servesim.perf.engine_kernels import (DECODE_HEAD_GROUP_MAX, MARLIN_INT4, OGS_MXFP4, PACK_GQA_PREFILL,  # noqa: E402
                                          KernelRates, rate_range)
from servesim.perf.kernels import OpModel  # noqa: E402

#: (table dtype, servesim format) pairs that set each key; GEMM tables.
GEMM_SETS = {"bf16": ("bfloat16",), "fp8": ("fp8", "fp8_block"), "fp4": ("nvfp4",)}
#: MoE table dtypes that set the weight-only streaming ratios.
MOE_SETS = {"stream_mxfp4": ("w4a16_mxfp4",), "stream_int4": ("int4_wo",)}
LOSS_SCALE = 0.1
#: (table dtype, engine) GEMM tables left out of the ceiling fits: they measure work serving does
#: not do (module docstring).
EXCLUDED = {("fp8_block", "vllm"), ("fp8", "trtllm")}
#: the GPU field of the streaming GEMMs' ramp and tail (GPUSpec.stream_ramp_us), fitted on the
#: bf16 GEMMs (pure weight streaming at small row counts, no quantization step), then held while
#: the quantized precisions' ceilings, streaming ratios and quantization latencies are fitted.
RAMP = "stream_ramp_us"


def _load(system: str, name: str):
    """(backend, rows) of each framework's ``name`` table: each precision from the newest
    version that measured it (bench_kernels.table_frames)."""
    from aiconfigurator_core.sdk import perf_database

    root = Path(perf_database.get_systems_paths()[0]) / "data"
    for backend, _, df in table_frames(root, system, (name,)):
        yield backend, df


def _with(gpu, values: dict):
    """``gpu`` with these ``achievable`` values (``quant_<prec>``: its quant_op_latency_us;
    ``stream_ramp_us``: its streaming GEMMs' ramp and tail)."""
    ach = {k: v for k, v in values.items() if not k.startswith("quant_") and k != RAMP}
    quant = {k[6:]: v for k, v in values.items() if k.startswith("quant_")}
    update = {"achievable": dict(gpu.achievable) | ach,
              "quant_op_latency_us": dict(gpu.quant_op_latency_us) | quant}
    if RAMP in values:
        update[RAMP] = float(values[RAMP])
    return gpu.model_copy(update=update)


def gemm_rows(system: str, rows: int):
    out = []
    for backend, df in _load(system, "gemm_perf"):
        for dt, g in df.groupby("gemm_dtype"):
            if (dt, backend) in EXCLUDED:
                continue  # see the module docstring
            fmt = GEMM_DTYPES.get(dt)
            if fmt is None:
                continue
            g = g if len(g) <= rows else g.sample(rows, random_state=0)
            out.append((dt, fmt, g.m.values, g.n.values, g.k.values, g.latency.values * 1e-3))
    return out


def moe_rows(system: str, rows: int):
    out = []
    major = load_gpu(SYSTEMS[system]).cuda_major
    for backend, df in _load(system, "moe_perf"):
        df = df[~df.distribution.astype(str).str.startswith("power_law") & (moe_excluded(df, major) == "")]
        for dt, g in df.groupby("moe_dtype"):
            fmt = GEMM_DTYPES.get(dt)
            if fmt is None:
                continue
            g = g if len(g) <= rows else g.sample(rows, random_state=0)
            out.append((dt, fmt, g))
    return out


def _gemm_err(gpu, params, sets, keys, x):
    ops = OpModel(_with(gpu, dict(zip(keys, x))), params)
    return np.concatenate([np.log(ops.gemm(m, n, k, fmt) / lat) for _, fmt, m, n, k, lat in sets])


def _moe_time(ops, fmt, g, backend=None):
    """Seconds the op model gives each balanced-routing MoE row of ``g`` (bench_kernels' pricing;
    ``backend``: the engine whose table it is, whose kernel paths its rows name)."""
    return next(_moe_class(ops, "", g, fmt, balanced=True, backend=backend))[1]


def _moe_paths(g, backend, major) -> np.ndarray:
    """Each row's kernel path off the engine's default for its format (``"None"`` on it)."""
    src = g.kernel_source.astype(str) if "kernel_source" in g else [""] * len(g)
    return np.array([str(moe_kernel_path(k, dt, backend, major)) for k, dt in zip(src, g.moe_dtype.astype(str))])


def fit_gpu(system: str, rows: int) -> tuple[dict, dict]:
    gpu = load_gpu(SYSTEMS[system])
    params = AnalyticParams()
    gemm = gemm_rows(system, rows)
    found, report = {}, {}
    base = gpu.model_copy(update={RAMP: 0.0})  # "before": the op model without the ramp
    for prec, dts in GEMM_SETS.items():
        sets = [s for s in gemm if s[0] in dts]
        if not sets or not gpu.supports(prec):
            continue
        if prec == "bf16":  # its compute ceiling is the measured 99th percentile; the ramp is fitted
            keys, x0, lo, hi = [RAMP], np.array([1.0]), [0.0], [10.0]
        else:
            keys = [prec, f"stream_{'nvfp4' if prec == 'fp4' else prec}", f"quant_{prec}"]
            x0 = np.array([gpu.ceiling(prec), 1.0, 0.0])
            lo, hi = [0.1, 0.1, 0.0], [1.0, 1.0, 30.0]
        before = _gemm_err(base, params, sets, [], [])
        fitted = _with(gpu, found)  # the ramp found on the bf16 GEMMs holds for the others
        res = least_squares(lambda x: _gemm_err(fitted, params, sets, keys, x), x0, bounds=(lo, hi),
                            loss="soft_l1", f_scale=LOSS_SCALE, x_scale=np.array(hi) / 10)
        after = _gemm_err(fitted, params, sets, keys, res.x)
        found.update({k: round(float(v), 3) for k, v in zip(keys, res.x)})
        report[f"gemm/{prec}"] = (before, after)
    gpu2 = _with(gpu, found)
    for key, dts in MOE_SETS.items():
        sets = [(fmt, g) for dt, fmt, g in moe_rows(system, rows // 4) if dt in dts]
        if not sets:
            continue

        def err(x):
            ops = OpModel(_with(gpu2, {key: float(x[0])}), params)
            return np.concatenate([np.log(_moe_time(ops, fmt, g) / (g.latency.values * 1e-3)) for fmt, g in sets])

        before = err([1.0])
        res = least_squares(err, [0.8], bounds=(0.1, 1.0), loss="soft_l1", f_scale=LOSS_SCALE)
        found[key] = round(float(res.x[0]), 3)
        report[f"moe/{key}"] = (before, err(res.x))
    return found, report


def fit_moe_scale(systems: list[str], rows: int) -> tuple[tuple[float, float], np.ndarray, np.ndarray]:
    """((moe_eff_scale, moe_expert_s), log errors at the current defaults, log errors at the fit):
    the grouped GEMMs' efficiency relative to the dense GEMMs, and the time each touched expert
    adds to the weight streaming, fitted together on every MoE table (all engines alike)."""
    sets = []
    for system in systems:
        gpu = load_gpu(SYSTEMS[system])
        sets += [(gpu, fmt, g) for dt, fmt, g in moe_rows(system, rows) if dt in ("bfloat16", "fp8", "fp8_block", "nvfp4")]
    if not sets:
        raise SystemExit("fit_kernel_ceilings: no MoE tables for these GPUs")
    params = AnalyticParams()

    def err(x):
        p = params.model_copy(update={"moe_eff_scale": float(x[0]), "moe_expert_s": float(x[1]) * 1e-6})
        return np.concatenate([np.log(_moe_time(OpModel(gpu, p), fmt, g) / (g.latency.values * 1e-3))
                               for gpu, fmt, g in sets])

    x0 = [params.moe_eff_scale, params.moe_expert_s * 1e6]
    res = least_squares(err, x0, bounds=([0.05, 0.0], [1.0, 2.0]), loss="soft_l1", f_scale=LOSS_SCALE)
    return (float(res.x[0]), float(res.x[1]) * 1e-6), err(x0), err(res.x)


#: servesim expert format → the MoE table dtypes that measure the kernels an engine serves it with
#: (``fp8``: block-scaled checkpoints; ``fp8_tensor``: per-tensor-scaled ones, ModelOpt FP8, run by
#: other kernels, ``KernelRates.fp8_per_tensor``; gpt-oss's MXFP4 experts run W4A16 on Hopper and
#: with MXFP8 activations on Blackwell).
MOE_FORMATS = {"bf16": {9: ("bfloat16",), 10: ("bfloat16",)},
               "fp8": {9: ("fp8_block",), 10: ("fp8_block",)},
               "fp8_tensor": {9: ("fp8",), 10: ("fp8",)},
               "fp4": {10: ("nvfp4",)},
               "mxfp4": {9: ("w4a16_mxfp4",), 10: ("w4a8_mxfp4_mxfp8",)},
               "int4": {9: ("int4_wo",), 10: ("int4_wo",)}}
#: A rate format's weight precision where the two differ.
MOE_PRECISION = {"fp8_tensor": "fp8"}
#: Rows per (table, GPU) sampled for one engine-rate fit.
ENGINE_ROWS = 400
#: A fused-MoE kernel's four rates (kernels.OpModel.moe): its math (large token counts), its
#: expert-weight streaming (decode-sized counts), its fixed cost (a handful of tokens: the
#: routing, sorting and permutation kernels and the launches, a factor on ``MOE_KERNELS``) and
#: the traffic of its masked slots (the expert-parallel rows: every rank handed the whole batch).
MOE_RATES = ("moe", "moe_stream", "moe_fixed", "moe_masked")
#: Layouts the MoE rates are fitted on: at most 8 ranks (one node), tensor- or expert-parallel,
#: where the engines' launch scripts serve the MoE models of calibration.csv.  The tables go on
#: to 128 ranks and more, one or two experts a rank, where the kernels fall further behind the
#: op model with every doubling; fitted on all of them, the rates traded one-node accuracy
#: (SGLang's bf16 MoE on H200 at decode sizes: 11% median error to 42%) for those.
ONE_NODE_RANKS = 8
#: The chunked gated-delta prefill kernel's three rates (kernels.OpModel.gated_delta): its math,
#: its chunk-to-chunk chain latency, its fixed cost.  Each engine ships its own kernel (FLA-style
#: Triton in SGLang, TensorRT-LLM's own, FlashInfer's tensor-core kernel in vLLM on Hopper and
#: Blackwell), fitted together on the context rows of the engine's gdn table.
LINEAR_ATTN_RATES = ("linear_attn", "linear_attn_chain", "linear_attn_fixed")
#: Decode attention's rates, fitted together per cache format on the generation tables: the KV
#: stream's rate and the op's fixed cost (a factor on ``kernels.ATTN_KERNELS``), what long and
#: short contexts are bound by.
DECODE_RATES = ("decode_attention", "decode_attention_fixed")
#: Prefill attention's rates, fitted together per format on the context tables: the kernel's math
#: and its thread blocks' fixed work (a factor on ``kernels.ATTN_CTA_OVERHEAD_BLOCKS``), what long
#: and short chunks are bound by.
PREFILL_RATES = ("prefill_attention", "prefill_attention_fixed")

#: MXFP4 experts: only gpt-oss ships them, and each engine serves it with its own MXFP4 kernel,
#: which the tables measure at gpt-oss's expert shape (hidden 2880, intermediate 2880, top-4 of
#: 32 or 128 experts): on Hopper vLLM's gpt-oss MXFP4 MoE (the table's kernel source names it:
#: OpenAI's Triton matmul kernels; InferenceX's H100 / H200 scripts select vLLM's Marlin path
#: instead, VLLM_MXFP4_USE_MARLIN=1, which no table measures) and TensorRT-LLM's W4A16 MoE; on
#: Blackwell the TensorRT-LLM-generated MXFP4 x MXFP8 kernels that TensorRT-LLM's TRTLLM MoE
#: backend runs and vLLM calls through FlashInfer (gptoss_fp4_b200_trt.sh: moe_config.backend
#: TRTLLM; gptoss_fp4_b200.sh: VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1).  The same tables' MXFP4
#: rows at other shapes (DeepSeek- and Kimi-sized experts) measure kernels no served checkpoint
#: runs, so the mxfp4 rates are fitted on the gpt-oss rows only, from the newest table version
#: that has them.
GPT_OSS_EXPERTS = {"hidden_size": 2880, "inter_size": 2880, "topk": 4}
#: Engines whose gpt-oss MoE kernel the tables identify.  SGLang's Hopper table measures its
#: generic fused-MoE Triton kernel with MXFP4 weights, not necessarily its gpt-oss path, and
#: no calibration row runs gpt-oss on SGLang: it keeps the op model.
MXFP4_ENGINES = ("vllm", "trtllm")
#: (engine, CUDA major) whose MXFP4 kernel is measured in another engine's table: vLLM on
#: Blackwell runs TensorRT-LLM's MXFP4 x MXFP8 kernels (through FlashInfer); its own tables
#: measure that dtype at non-gpt-oss shapes only.
MXFP4_KERNEL_TABLE = {("vllm", 10): "trtllm"}


#: The dense NVFP4 GEMM op's one engine rate, ``gemm_quant``: the fixed cost of the engine's
#: activation-quantization op beyond its kernel latency (perf/engine_kernels.py), fitted on each
#: engine's nvfp4 gemm_perf tables with the GPU's ceilings, streaming ratio and pooled
#: ``quant_op_latency_us`` held.  The GEMM kernel is the same FlashInfer CuTe-DSL one in SGLang's
#: and vLLM's tables, so their GEMMs get no rate of their own.
GEMM_QUANT_RATES = ("gemm_quant",)
#: A weight-only (mixed-input) dense GEMM's two engine rates (perf/engine_kernels.py): its math
#: and its fixed cost, what large and small matrices are bound by (its 4- or 8-bit weights stream
#: at the GPU's rate: fitted too, that rate came out 1.10-1.13 for TensorRT-LLM's A100 ops, 0.83
#: for SGLang's H100 int8 op, for a median error a point lower); fitted on each engine's
#: ``int8_wo`` / ``int4_wo`` gemm_perf tables.
GEMM_WO_RATES = ("gemm_wo", "gemm_wo_fixed")


def _decode_time(ops: OpModel, kind: str, g):
    """Seconds the op model gives each row of a generation-attention (``gqa``) or -MLA table."""
    kvb = g.kv_cache_dtype.map(KV_BYTES).fillna(2.0).values
    ctx = g.isl.values + g.step.values
    if kind == "mla":
        return ops.mla_decode(g.batch_size.values, ctx, g.num_heads.values, qk_rope=MLA["qk_rope"],
                              kv_lora=MLA["kv_lora"], kv_bytes=kvb)
    win = g.window_size.values if "window_size" in g else 0
    return ops.attention_decode(g.batch_size.values, ctx, g.num_heads.values, g.num_key_value_heads.values,
                                g.head_dim.values, win, kvb)


def _engine_sets(systems: list[str], rows: int) -> dict[tuple[str, int, str, str], list]:
    """(engine, CUDA major, op, format) → [(gpu, reader, table rows)] from every GPU's tables."""
    from bench_kernels import _context_attention, _context_mla, _sample

    sets: dict[tuple[str, int, str, str], list] = {}
    for system in systems:
        gpu = load_gpu(SYSTEMS[system])
        major = gpu.cuda_major
        for backend, df in _load(system, "gemm_perf"):
            # the engine's NVFP4 activation-quantization op (GEMM_QUANT_RATES) and its
            # weight-only GEMMs (GEMM_WO_RATES), Ampere's included
            for op, dt, fmt in (("gemm_quant", "nvfp4", "fp4"), ("gemm_wo", "int8_wo", "int8_wo"),
                                ("gemm_wo", "int4_wo", "int4")):
                g = df[df.gemm_dtype == dt]
                if len(g):
                    sets.setdefault((backend, major, op, fmt), []).append(
                        (gpu, lambda ops, g, f=fmt: ops.gemm(g.m.values, g.n.values, g.k.values, f) * 1e3,
                         _sample(g, rows)))
        if major not in (9, 10):
            continue
        for engine, by in _gptoss_mxfp4_rows(system, major).items():
            sets.setdefault((engine, major, "moe", "mxfp4"), []).append(
                (gpu, lambda ops, g: _moe_time(ops, "mxfp4", g) * 1e3, _sample(by, rows)))
        for name in ("moe_perf", "context_mla_perf", "context_attention_perf", "gdn_perf",
                     "generation_attention_perf", "generation_mla_perf"):
            for backend, df in _load(system, name):
                if name in ("generation_attention_perf", "generation_mla_perf"):
                    # decode attention's KV stream, per cache format (bf16, fp8), full and windowed
                    # rows together, without the Triton fallback's rows
                    kind = "mla" if name == "generation_mla_perf" else "gqa"
                    df = df[~df.kernel_source.astype(str).str.contains(FALLBACK_ATTENTION)]
                    fp8 = df.kv_cache_dtype.map(KV_BYTES).fillna(2.0) < 2.0
                    for fmt, g in ((kind, df[~fp8]), (kind + "_fp8", df[fp8])):
                        if len(g):
                            sets.setdefault((backend, major, "decode_attention", fmt), []).append(
                                (gpu, lambda ops, g, k=kind: _decode_time(ops, k, g) * 1e3, _sample(g, rows)))
                    continue
                if name == "gdn_perf":
                    g = df[(df.phase == "context") & ~df.kernel_source.astype(str).str.contains("conv1d")]
                    if len(g):
                        sets.setdefault((backend, major, "linear_attn", "gdn"), []).append(
                            (gpu, lambda ops, g: gdn_time(ops, g) * 1e3, _sample(g, rows)))
                    continue
                if name == "moe_perf":
                    df = df[~df.distribution.astype(str).str.startswith("power_law") & (moe_excluded(df, major) == "")]
                    for fmt, by_major in MOE_FORMATS.items():
                        if fmt == "mxfp4":
                            continue  # _gptoss_mxfp4_rows
                        g = df[df.moe_dtype.isin(by_major.get(major, ()))]
                        g = g[g.moe_tp_size * g.moe_ep_size <= ONE_NODE_RANKS]
                        # each kernel path its own rates: the engine's default path for the
                        # format under the format, another under ``<format>@<path>``
                        paths = _moe_paths(g, backend, major)
                        for path in sorted(set(paths)):
                            gp = g[paths == path]
                            key = fmt if path == "None" else f"{fmt}@{path}"
                            if len(gp) and not (path == "marlin" and fmt != "int4"):
                                sets.setdefault((backend, major, "moe", key), []).append(
                                    (gpu, lambda ops, g, f=MOE_PRECISION.get(fmt, fmt), b=backend:
                                     _moe_time(ops, f, g, b) * 1e3, _sample(gp, rows)))
                    # the W4A16 MXFP4 kernels that are not an engine's gpt-oss kernel on this GPU
                    # (Blackwell's bf16-activation kernels): their own path's rates
                    g = df[df.moe_dtype.isin(("w4a16_mxfp4",)) & (df.moe_tp_size * df.moe_ep_size <= ONE_NODE_RANKS)]
                    paths = _moe_paths(g, backend, major)
                    for path in sorted(set(paths) - {"None", "marlin"}):
                        gp = g[paths == path]
                        sets.setdefault((backend, major, "moe", f"mxfp4@{path}"), []).append(
                            (gpu, lambda ops, g, b=backend: _moe_time(ops, "mxfp4", g, b) * 1e3, _sample(gp, rows)))
                elif name == "context_mla_perf":
                    sets.setdefault((backend, major, "prefill_attention", "mla"), []).append(
                        (gpu, lambda ops, g: next(_context_mla(ops, g, len(g)))[1] * 1e3, _sample(df, rows)))
                else:  # full attention and sliding windows: each engine's own kernel path
                    # an engine's rate is fitted on the kernels it serves with, not its Triton fallback
                    df = df[~df.kernel_source.astype(str).str.contains(FALLBACK_ATTENTION)]
                    w = df.window_size if "window_size" in df else 0 * df.isl
                    for fmt, g in (("gqa", df[w == 0]), ("gqa_window", df[w > 0])):
                        if len(g):
                            sets.setdefault((backend, major, "prefill_attention", fmt), []).append(
                                (gpu, lambda ops, g: next(_context_attention(ops, g, len(g)))[1] * 1e3,
                                 _sample(g, rows)))
    return sets


def _gptoss_mxfp4_rows(system: str, major: int) -> dict:
    """engine → the balanced-routing MXFP4 MoE rows at gpt-oss's expert shape (the dtype the
    engines serve on this CUDA major, :data:`MOE_FORMATS`; every token count, on the layouts of
    :data:`ONE_NODE_RANKS`), from the newest version of the table
    that has them (:data:`MXFP4_KERNEL_TABLE`: the table measuring the engine's kernel)."""
    import pyarrow.parquet as pq
    from aiconfigurator_core.sdk import perf_database

    from bench_kernels import _version_key

    root = Path(perf_database.get_systems_paths()[0]) / "data" / system
    dtypes = MOE_FORMATS["mxfp4"].get(major, ())
    found: dict[str, tuple] = {}
    for f in root.glob("moe/*/*/moe_perf.parquet"):
        backend, version = f.parts[-3], f.parts[-2]
        df = pq.read_table(f).to_pandas()
        keep = df.moe_dtype.isin(dtypes) & (df.latency > 0) & \
            ~df.distribution.astype(str).str.startswith("power_law")
        for col, v in GPT_OSS_EXPERTS.items():
            keep &= df[col] == v
        keep &= df.moe_tp_size * df.moe_ep_size <= ONE_NODE_RANKS
        if keep.any() and (backend not in found or _version_key(version) > found[backend][0]):
            found[backend] = (_version_key(version), df[keep])
    out = {b: g for b, (_, g) in found.items()}
    for (engine, m), source in MXFP4_KERNEL_TABLE.items():
        if m == major and source in out:
            out[engine] = out[source]
    return {e: g for e, g in out.items() if e in MXFP4_ENGINES and len(g)}


def gptoss_moe_report(systems: list[str]) -> list[tuple]:
    """(GPU, engine, rows, median |error| and bias without and with the engine's rates) of the
    op model on the served gpt-oss MXFP4 MoE rows at every token count and layout up to
    :data:`ONE_NODE_RANKS` ranks, expert-parallel ones included (the rows the rates are fitted on)."""
    from servesim.perf.engine_kernels import NO_RATES, kernel_rates

    params = AnalyticParams()
    out = []
    for system in systems:
        gpu = load_gpu(SYSTEMS[system])
        if gpu.cuda_major not in (9, 10):
            continue
        for engine, g in sorted(_gptoss_mxfp4_rows(system, gpu.cuda_major).items()):
            meas = g.latency.values
            errs = [_moe_time(OpModel(gpu, params, r), "mxfp4", g) * 1e3 / meas - 1
                    for r in (NO_RATES, kernel_rates(engine, gpu))]
            out.append((SYSTEMS[system], engine, len(g), *[(float(np.median(np.abs(e))), float(np.median(e)))
                                                           for e in errs]))
    return out


def fit_engine_rates(systems: list[str], rows: int = ENGINE_ROWS) -> list[dict]:
    """One entry per (engine, CUDA major, op, format): the fitted rate, its rows and errors."""
    params = AnalyticParams()
    out = []
    for (engine, major, op, fmt), parts in sorted(_engine_sets(systems, rows).items()):
        # a MoE kernel has four rates (:data:`MOE_RATES`),
        # the gated-delta prefill three, prefill attention one
        fitted = MOE_RATES if op == "moe" \
            else LINEAR_ATTN_RATES if op == "linear_attn" else DECODE_RATES if op == "decode_attention" \
            else PREFILL_RATES if op == "prefill_attention" else GEMM_WO_RATES if op == "gemm_wo" else (op,)

        # the engine's kernel structure (which kernels it runs) as servesim prices it
        kinds = dict(int4_marlin=(engine, major) in MARLIN_INT4, mxfp4_ogs=(engine, major) in OGS_MXFP4,
                     decode_head_group_max=DECODE_HEAD_GROUP_MAX.get(engine, 0),
                     prefill_pack_gqa=(engine, major) in PACK_GQA_PREFILL)

        def err(x, parts=parts, fitted=fitted, fmt=fmt, kinds=kinds):
            rates = KernelRates({(o, fmt): float(v) for o, v in zip(fitted, x)}, fp8_per_tensor=fmt.startswith("fp8_tensor"),
                                **kinds)
            return np.concatenate([np.log(price(OpModel(gpu, params, rates), g) / g.latency.values)
                                   for gpu, price, g in parts])

        x0 = [1.0] * len(fitted)
        before = err(x0)
        bounds = tuple(zip(*(rate_range(o) for o in fitted)))
        res = least_squares(err, x0, bounds=bounds, loss="soft_l1", f_scale=LOSS_SCALE)
        after = err(res.x)
        for o, v in zip(fitted, res.x):
            out.append(dict(engine=engine, cuda_major=major, op=o, format=fmt, rate=round(float(v), 3),
                            rows=int(before.size), median_abs_before=float(np.median(np.abs(np.expm1(before)))),
                            median_abs_after=float(np.median(np.abs(np.expm1(after))))))
    return out


def kept(e: dict) -> bool:
    """A fitted rate is kept when it lowers the median error of its own rows (the kernel-level
    figure): a rate that only trades large shapes for small ones is no evidence of a different
    kernel.  Kimi's int4 experts are fitted like the others: vLLM serves its compressed-tensors
    W4A16 checkpoint with its Marlin MoE kernel, the kernel its ``int4_wo`` table measures at
    Kimi's expert shape (kernel source ``compressedtensorswna16marlinmoe``)."""
    return e["median_abs_after"] < e["median_abs_before"]


def write_engine_rates(entries: list[dict], path: Path) -> None:
    lines = ["# Each serving engine's own kernels against servesim's op model, per CUDA major version (9 Hopper,",
             "# 10 Blackwell): the factor on the op's compute efficiency (decode_attention: its KV stream's rate;",
             "# the *_fixed ops: its kernel count; prefill_attention_fixed: its thread blocks' fixed work)",
             "# that fits the engine's measured",
             "# per-kernel tables (aiconfigurator-core) best, kept where it lowers the median error of",
             "# those rows.  Written by",
             "#   PYTHONPATH=src python benchmarks/fit_kernel_ceilings.py --engine-kernels --out <this file>",
             "# (perf/engine_kernels.py reads it; `rows` and the median errors are the fit's own record).",
             "rates:"]
    for e in filter(kept, entries):
        lines.append(f"  - {{engine: {e['engine']}, cuda_major: {e['cuda_major']}, op: {e['op']}, format: {e['format']}, "
                     f"rate: {e['rate']}, rows: {e['rows']}, median_abs_error: "
                     f"[{e['median_abs_before']:.3f}, {e['median_abs_after']:.3f}]}}")
    path.write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", help="aiconfigurator systems (default: every one servesim knows)")
    ap.add_argument("--rows", type=int, default=1500, help="rows per table and dtype (fixed-seed sample)")
    ap.add_argument("--moe", action="store_true", help="fit the global moe_eff_scale and moe_expert_s instead (NVIDIA Hopper and "
                    "Blackwell GPUs, --rows / 6 rows per table)")
    ap.add_argument("--engine-kernels", action="store_true", help="fit each engine's kernel rates instead "
                    "(perf/engine_kernels.py)")
    ap.add_argument("--out", type=Path, help="with --engine-kernels: write the YAML file here")
    ap.add_argument("--gpt-oss-moe", action="store_true", help="report the op model on the MXFP4 MoE kernels "
                    "the engines serve gpt-oss with, without and with the shipped engine rates")
    a = ap.parse_args(argv)
    try:
        import aiconfigurator_core  # noqa: F401
    except ImportError:
        print("fit_kernel_ceilings: needs aiconfigurator-core (pip install 'servesim[aic]')", file=sys.stderr)
        return 2
    systems = a.gpus.split(",") if a.gpus else list(SYSTEMS)
    if a.gpt_oss_moe:
        print(f"{'gpu':<10} {'engine':<7} {'rows':>5}  median |e|, bias: op model -> with the engine's rates")
        for gpu, engine, n, (m0, b0), (m1, b1) in gptoss_moe_report(systems):
            print(f"{gpu:<10} {engine:<7} {n:>5}  {100 * m0:5.1f}%, {100 * b0:+6.1f}% -> {100 * m1:5.1f}%, {100 * b1:+6.1f}%")
        return 0
    if a.engine_kernels:
        entries = fit_engine_rates(systems)
        for e in entries:
            print(f"{e['engine']:<7} sm{e['cuda_major']}x {e['op']:<18} {e['format']:<6} rate {e['rate']:5.3f}  "
                  f"rows {e['rows']:5d}  median |e| {100 * e['median_abs_before']:5.1f}% -> "
                  f"{100 * e['median_abs_after']:5.1f}%{'' if kept(e) else '  (not kept)'}")
        if a.out:
            write_engine_rates(entries, a.out)
        return 0
    if a.moe:
        hopper_blackwell = [s for s in systems if s not in ("a100_sxm", "l40s")]
        (scale, per_expert), b, f = fit_moe_scale(hopper_blackwell, max(1, a.rows // 6))
        e_b, e_f = np.expm1(b), np.expm1(f)
        print(f"moe_eff_scale: {scale:.3f}  moe_expert_s: {per_expert:.3g}   median |e| {100 * np.median(np.abs(e_b)):.1f}% -> "
              f"{100 * np.median(np.abs(e_f)):.1f}%   bias {100 * np.median(e_b):+.1f}% -> {100 * np.median(e_f):+.1f}%")
        return 0
    for system in systems:
        found, report = fit_gpu(system, a.rows)
        print(f"# {SYSTEMS[system]}")
        for k, (b, f) in report.items():
            e_b, e_f = np.expm1(b), np.expm1(f)
            print(f"#   {k:<20} median |e| {100 * np.median(np.abs(e_b)):5.1f}% -> {100 * np.median(np.abs(e_f)):5.1f}%"
                  f"   bias {100 * np.median(e_b):+5.1f}% -> {100 * np.median(e_f):+5.1f}%")
        ramp = found.pop(RAMP, None)
        print("achievable: {" + ", ".join(f"{k}: {v}" for k, v in found.items() if not k.startswith("quant_")) + "}")
        print("quant_op_latency_us: {" + ", ".join(f"{k[6:]}: {v}" for k, v in found.items() if k.startswith("quant_")) + "}")
        if ramp is not None:
            print(f"{RAMP}: {ramp}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
