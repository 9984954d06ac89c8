"""vLLM's flags for a measured row: InferenceX's launch scripts at the row's date, the README's
typical flags elsewhere, and the KV precision each of them implies.

The scripts changed flags over time (``benchmarks/``, later ``benchmarks/single_node/`` in
SemiAnalysisAI/InferenceX), so a row takes the version in effect on its ``measured_date``
(:func:`vllm_inferencex_options`, :func:`vllm_inferencex_kv_dtype`); rows no script covers take
the README's flags (:func:`vllm_options`) and ``--kv-cache-dtype`` as :func:`vllm_kv_dtype` infers it.
"""

from __future__ import annotations

from typing import Any

from servesim.validate.recipes.rows import from_inferencex, row_int

def _vllm_max_model_len(isl: int, osl: int) -> int:
    """--max-model-len as the 2025 gpt-oss / Llama launch scripts compute it (CALCULATED_MAX_MODEL_LEN)."""
    if isl == 1024 and osl == 1024:
        return isl + osl + 20
    if 8192 in (isl, osl):
        return isl + osl + 200
    return 10240


def vllm_inferencex_options(row: dict[str, str]) -> dict[str, Any] | None:
    """vLLM flags of the InferenceX launch script that ran this row; None if no script covers it.

    Read from SemiAnalysisAI/InferenceX (``benchmarks/``, later ``benchmarks/single_node/``) at
    the version in effect on the row's ``measured_date``.  Only flags servesim's vLLM model
    honours are mapped; a flag a script does not pass keeps vLLM's default (the option's:
    ``max_num_seqs``/``max_num_batched_tokens`` unset → 1024 / 8192 on these GPUs, block size
    16).  Prefix caching stays off: the scripts dated before 2026-03-27 left vLLM's default
    (on), which changes nothing for InferenceX's random prompts (no shared blocks).
    """
    if not from_inferencex(row):
        return None
    model = row["model"].lower()
    precision = (row.get("precision") or "").strip().lower()
    system = (row.get("system") or "").strip().lower()
    date = (row.get("measured_date") or "").strip()
    conc, isl, osl = row_int(row, "concurrency"), row_int(row, "isl"), row_int(row, "osl")
    opts: dict[str, Any] = {"enable_prefix_caching": False}
    if "minimax-m2" in model:
        if system == "h100_sxm":
            # single_node/minimaxm2.5_fp8_h100.sh (2026-03): --gpu-memory-utilization 0.90
            # --max-num-seqs 256, no --max-num-batched-tokens
            opts.update(gpu_memory_utilization=0.9, max_num_seqs=256)
        elif system == "h200_sxm":
            # single_node/minimaxm2.5_fp8_h200.sh (2026-03): --gpu-memory-utilization 0.95, no
            # --max-num-seqs / --max-num-batched-tokens
            opts["gpu_memory_utilization"] = 0.95
        elif system in ("b200_sxm", "b300_sxm"):
            if precision == "fp8":
                opts["block_size"] = 32  # minimaxm2.5_fp8_b200.sh, minimaxm2.5_fp8_b300.sh: --block-size=32
            if precision == "fp8" and system == "b200_sxm" and date < "2026-04-03":
                # single_node/minimaxm2.5_fp8_b200.sh before 2026-04-03 (the v0.17.0 rows):
                # --gpu-memory-utilization 0.95, vLLM's default token budget and seats
                opts["gpu_memory_utilization"] = 0.95
            elif precision == "fp4" and system == "b200_sxm" and date < "2026-04-07":
                # minimaxm2.5_fp4_b200.sh as PR 996's branch had it (08bcde8f1, 2026-04-02; the
                # rows of 2026-04-03 ran its nightly image): --gpu-memory-utilization 0.95
                # --block-size=32, no --max-num-batched-tokens; 0.90 and 2 x ISL from a9c199207
                opts.update(gpu_memory_utilization=0.95, block_size=32)
            else:
                # single_node/minimaxm2.5_fp8_b200.sh (from 2026-04-03), minimaxm2.5_fp8_b300.sh,
                # minimaxm2.5_fp4_b200.sh, minimaxm2.5_fp4_b300.sh: --gpu-memory-utilization 0.90
                # --max-num-batched-tokens $((ISL * 2)), no --max-num-seqs
                opts.update(gpu_memory_utilization=0.9, max_num_batched_tokens=2 * isl)
        else:
            return None
        return opts
    if "gpt-oss" in model and system in ("b200_sxm", "h100_sxm", "h200_sxm"):
        # gptoss_fp4_b200_docker.sh (2025-11), single_node/gptoss_fp4_b200.sh (2026-02):
        # --max-num-seqs 512; gptoss_fp4_h100_{slurm,docker}.sh (2025-12),
        # gptoss_fp4_h200_slurm.sh (2025-11), single_node/gptoss_fp4_h{100,200}.sh (2026-03):
        # --max-num-seqs $CONC; all max-num-batched-tokens 8192, --gpu-memory-utilization 0.9,
        # max-model-len 10240 (H100) or CALCULATED_MAX_MODEL_LEN
        opts.update(max_num_seqs=512 if system == "b200_sxm" else conc, max_num_batched_tokens=8192,
                    gpu_memory_utilization=0.9,
                    max_model_len=10240 if system == "h100_sxm" else _vllm_max_model_len(isl, osl))
        if system in ("h100_sxm", "h200_sxm") and date >= "2026-01-02":
            # VLLM_MXFP4_USE_MARLIN=1 in the H100 / H200 scripts from InferenceX PR 327 (4e52ed4c6,
            # 2026-01-02, the vLLM 0.13 update: "fix H100/H200 perf regression")
            opts["mxfp4_use_marlin"] = True
        return opts
    if "llama-3.1-70b" in model and system in ("b200_sxm", "h100_sxm", "h200_sxm"):
        # 70b_fp8_b200_docker.sh, 70b_fp4_b200_docker.sh: --max-num-seqs 512; 70b_fp8_h100_slurm.sh,
        # 70b_fp8_h200_slurm.sh: --max-num-seqs $CONC; all max-num-batched-tokens 8192,
        # --gpu-memory-utilization 0.9; max-model-len 10240 (H100), CALCULATED_MAX_MODEL_LEN
        # (fp4 B200, H200), the workflow's $MAX_MODEL_LEN (fp8 B200: not set here)
        opts.update(max_num_seqs=512 if system == "b200_sxm" else conc, max_num_batched_tokens=8192,
                    gpu_memory_utilization=0.9)
        if system == "h100_sxm":
            opts["max_model_len"] = 10240
        elif system == "h200_sxm" or precision == "fp4":
            opts["max_model_len"] = _vllm_max_model_len(isl, osl)
        return opts
    if "kimi-k2" in model and system in ("b200_sxm", "b300_sxm", "h200_sxm"):
        # single_node/kimik2.5_int4_b200.sh, kimik2.5_int4_h200.sh: --gpu-memory-utilization 0.95;
        # kimik2.5_fp4_b200.sh, kimik2.5_fp4_b300.sh: 0.90; all --max-num-seqs $CONC;
        # kimik2.5_fp4_b200.sh from 2026-04-20 adds --max-num-batched-tokens $((ISL * 2))
        opts.update(max_num_seqs=conc, gpu_memory_utilization=0.95 if precision == "int4" else 0.9,
                    max_num_batched_tokens=8192)
        if precision == "fp4" and system == "b200_sxm" and date >= "2026-04-20":
            opts["max_num_batched_tokens"] = 2 * isl
        return opts
    return None


def vllm_options(row: dict[str, str]) -> dict[str, Any]:
    """The vLLM engine section of a point (without its name): the InferenceX script's flags where
    one covers the row, else the README's; async scheduling where the row's vLLM runs it by
    default (:func:`vllm_async_scheduling`)."""
    opts = vllm_inferencex_options(row)
    if opts is None:
        # rows no InferenceX script covers: the README's flags (max_num_seqs = concurrency,
        # max_num_batched_tokens 8192, no prefix caching, gpu_memory_utilization 0.9)
        opts = {"max_num_seqs": row_int(row, "concurrency"), "max_num_batched_tokens": 8192,
                "enable_prefix_caching": False, "gpu_memory_utilization": 0.9}
    opts["async_scheduling"] = vllm_async_scheduling(row)
    return opts


#: vLLM 0.14.0 (released 2026-01-20) turned async scheduling on by default (PR 27614; release
#: notes: "Async scheduling is now enabled by default"), except with pipeline parallelism, the
#: CPU backend and speculative methods other than MTP / EAGLE, which no row here uses.
VLLM_ASYNC_DEFAULT_VERSION = (0, 14)
VLLM_ASYNC_DEFAULT_DATE = "2026-01-20"


def vllm_async_scheduling(row: dict[str, str]) -> bool:
    """Whether the row's vLLM scheduled asynchronously: its version is 0.14 or later, or (a
    nightly image, no release number) it was measured after 0.14 came out, or its InferenceX
    launch script asked for it.  The 2025 scripts of gpt-oss (``gptoss_fp4_{b200,h100,h200}_*.sh``)
    and Llama-3.1-70B (``70b_*_{b200,h100,h200}_*.sh``, until their removal on 2025-10-29) write
    ``async-scheduling: true`` into the ``config.yaml`` they serve with; later scripts pass no
    such flag and take the default of their vLLM."""
    version = _version(row.get("backend_version", ""))
    if version and version >= VLLM_ASYNC_DEFAULT_VERSION:
        return True
    date = (row.get("measured_date") or "").strip()
    if "nightly" in (row.get("backend_version") or "") and date >= VLLM_ASYNC_DEFAULT_DATE:
        return True
    model = (row.get("model") or "").lower()
    return vllm_inferencex_options(row) is not None and ("gpt-oss" in model or "llama-3.1-70b" in model)


def vllm_inferencex_kv_dtype(row: dict[str, str]) -> str | None:
    """KV precision of an InferenceX vLLM run: ``fp8`` where its launch script passes
    ``--kv-cache-dtype fp8``, else vLLM's ``auto`` (the model's activation dtype, bf16); None
    for rows no script covers (:func:`vllm_inferencex_options`).

    Scripts without the flag (versions in effect on the row's date, as for
    :func:`vllm_inferencex_options`): MiniMax-M2.5 on H100 / H200 and fp8 on B200 before
    2026-04-03; Kimi-K2.5 int4 (B200, H200), fp4 on B300 and on B200 before 2026-04-20; gpt-oss
    on H100 / H200, and on B200 before 2026-02 (``single_node/gptoss_fp4_b200.sh`` adds it).
    The Llama-3.1-70B scripts and the later MiniMax / Kimi ones pass it.
    """
    if vllm_inferencex_options(row) is None:
        return None
    model = row["model"].lower()
    precision = (row.get("precision") or "").strip().lower()
    system = (row.get("system") or "").strip().lower()
    date = (row.get("measured_date") or "").strip()
    auto = False
    if "minimax-m2" in model:
        auto = system in ("h100_sxm", "h200_sxm") or (system == "b200_sxm" and precision == "fp8"
                                                       and date < "2026-04-03")
    elif "kimi-k2" in model:
        auto = precision == "int4" or system == "b300_sxm" or (system == "b200_sxm" and date < "2026-04-20")
    elif "gpt-oss" in model:
        auto = system in ("h100_sxm", "h200_sxm") or date < "2026-02"
    return "bf16" if auto else "fp8"


def _version(text: str) -> tuple[int, ...]:
    """``"0.15.1"`` → ``(0, 15, 1)``; ``()`` when the text does not start with a number."""
    parts: list[int] = []
    for piece in (text or "").strip().lstrip("v").split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def vllm_kv_dtype(row: dict[str, str]) -> str | None:
    """KV precision of a vLLM point; None leaves vLLM's ``auto`` (bf16 in the engine model).

    * A row an InferenceX launch script covers: what the script passes
      (:func:`vllm_inferencex_kv_dtype`).
    * Other ``inferencex_random`` rows: the README's typical ``--kv-cache-dtype fp8``.
    * Rows whose server flags are undocumented (``fixed_lengths_unverified``): vLLM's ``auto``.
      That is the activation dtype, bf16, except that since vLLM's December 2025 change (PR
      30785, re-landing the reverted 29980: after 0.12, before the 0.17 of the Kimi fp4 rows)
      ``auto`` takes fp8 from a ModelOpt checkpoint's ``kv_cache_quant_algo``, which NVIDIA's
      NVFP4 checkpoints set: fp4 rows on vLLM after 0.12 run fp8 KV.  The int4
      (compressed-tensors, no KV scheme), Qwen's fp8 and bf16 checkpoints stay bf16, and so
      does NVIDIA's Llama-3.1-8B-FP8 on vLLM 0.12.
      The KV-bound rows agree both ways: Qwen3-32B bf16 H100 tp2 c128 4096/512 waits 33 s for
      its first token (bf16 KV: about half of the requests fit at once; fp8 would fit them
      all), and Kimi-K2.5 fp4 B200 tp4 c64 8192/1024 only 1.3 s (bf16 KV would leave it
      queueing for ~20 s).
    """
    script = vllm_inferencex_kv_dtype(row)
    if script is not None:
        return script
    if row.get("workload") == "inferencex_random":
        return "fp8"
    precision = (row.get("precision") or "").strip().lower()
    if precision == "fp4" and _version(row.get("backend_version", "")) >= (0, 13):
        return "fp8"
    return None
