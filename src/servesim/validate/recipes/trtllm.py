"""TensorRT-LLM's flags for a measured row: InferenceX's launch scripts, their MTP variants, KV precision.

A row InferenceX's scripts ran takes its model family's script flags at the row's date
(:func:`trtllm_inferencex_options`); DeepSeek rows that InferenceX's MTP configs ran take the MTP
scripts' flags and run speculative decoding (:func:`inferencex_mtp_sweep`, :func:`trtllm_mtp_options`);
other rows (NVIDIA's ``fixed_lengths_unverified`` campaigns) take the README's typical flags
(:func:`trtllm_options`).  Everything here reads the row only, so ``validate/points.py`` and
``recipes/__init__.py`` assemble the point from it.
"""

from __future__ import annotations

from typing import Any

from servesim.validate.recipes.rows import from_inferencex, row_int, worker_gpus

#: InferenceX sweeps that ran only the DeepSeek-R1 TensorRT-LLM MTP configs, keyed by
#: ``(system, precision, measured_date)``; the value names the launch-script version
#: (:func:`trtllm_mtp_options`).  InferenceX's ``perf-changelog.yaml`` lists the config keys
#: each change sweeps: PR 392 (merged 2026-01-14) added ``dsr1-fp4-b200-trt-mtp``,
#: ``dsr1-fp8-b200-trt-mtp`` and ``dsr1-fp8-h200-trt-mtp`` and swept only them; PR 632
#: (2026-02-05) only ``dsr1-fp8-b200-trt-mtp`` and PR 642 (2026-02-06) only
#: ``dsr1-fp4-b200-trt-mtp``, both moving them to TensorRT-LLM 1.2.0rc6.post3 while the plain
#: configs stayed on 1.2.0rc6.post2.  The rows of those dates are speculative runs the source did
#: not flag (the measured README allows that "a few" are): at c4 their TPOT is half that of the
#: plain runs of the same layout.  Sweeps that ran both kinds are :data:`INFERENCEX_MIXED_MTP_SWEEPS`.
INFERENCEX_TRTLLM_MTP_SWEEPS: dict[tuple[str, str, str], str] = {
    ("b200_sxm", "fp4", "2026-01-14"): "pr392",
    ("b200_sxm", "fp8", "2026-01-14"): "pr392",
    ("h200_sxm", "fp8", "2026-01-14"): "pr392",
    ("b200_sxm", "fp8", "2026-02-05"): "pr632",
    ("b200_sxm", "fp4", "2026-02-06"): "pr642",
}
#: InferenceX sweeps that ran a plain DeepSeek TensorRT-LLM config and its MTP twin on the same day,
#: keyed by ``(system, precision, measured_date)``: the plain config's search space as
#: ``(isl, osl, tp, ep, attention_dp on, lowest, highest concurrency)`` entries
#: (``.github/configs/nvidia-master.yaml`` of that date), and the MTP script version.  A row the
#: plain config could not have produced is an MTP run; the rest stay plain (ambiguous).  The full
#: sweep of 2026-01-28 (PR 587) ran ``dsr1-fp8-h200-trt`` and ``-trt-mtp``.  The image updates of
#: 2026-05-18 (PRs 1487-1489) ran each DeepSeek TRT-LLM config with its MTP twin too, but their rows
#: lie inside the plain search spaces (and are ``confirmed: no speculative decoding``), so they are
#: not listed.  Only TensorRT-LLM's MTP is mapped (:func:`mtp_draft_tokens`).  (SGLang's image update
#: of 2026-03-25, PR 943, likewise ran ``dsr1-fp8-b200-sglang`` and ``-sglang-mtp``, and five B200
#: SGLang rows lie outside the plain config's space; they stay plain: servesim's speculative model
#: matches their TPOT only at an acceptance below 0.3, docs/validation.md.)
INFERENCEX_MIXED_MTP_SWEEPS: dict[tuple[str, str, str], tuple[tuple[tuple[int, ...], ...], str]] = {
    ("h200_sxm", "fp8", "2026-01-28"): (
        ((1024, 1024, 8, 8, 0, 4, 64), (1024, 8192, 8, 8, 0, 4, 64), (8192, 1024, 8, 8, 0, 4, 32),
         (8192, 1024, 8, 8, 1, 64, 64)), "pr392"),
}
#: Conditional acceptance of each MTP draft position for those runs (``acceptance_rate``: the same
#: at every position).  Fitted on the fit split's MTP rows (docs/validation.md); DeepSeek-V3's
#: report gives 85-90% for its one MTP module's token.
INFERENCEX_MTP_ACCEPTANCE = 0.7


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def inferencex_mtp_sweep(row: dict[str, str]) -> str | None:
    """The MTP launch-script version that ran this row, or None: a DeepSeek TensorRT-LLM row of an
    MTP-only sweep (:data:`INFERENCEX_TRTLLM_MTP_SWEEPS`) or one outside the plain config's search
    space in a sweep that ran both (:data:`INFERENCEX_MIXED_MTP_SWEEPS`); never a row the source
    confirms was not speculative."""
    if "deepseek" not in row["model"].lower() or not from_inferencex(row):
        return None
    if (row.get("backend") or "").strip().lower() != "trtllm":
        return None
    if (row.get("quality") or "").strip() == "confirmed: no speculative decoding":
        return None
    key = ((row.get("system") or "").strip().lower(), (row.get("precision") or "").strip().lower(),
           (row.get("measured_date") or "").strip())
    if key in INFERENCEX_TRTLLM_MTP_SWEEPS:
        return INFERENCEX_TRTLLM_MTP_SWEEPS[key]
    mixed = INFERENCEX_MIXED_MTP_SWEEPS.get(key)
    if mixed is None:
        return None
    plain_space, version = mixed
    layout = (row_int(row, "isl"), row_int(row, "osl"), worker_gpus(row), row_int(row, "moe_ep"),
              int(row_int(row, "attention_dp") > 1))
    conc = row_int(row, "concurrency")
    if any(entry[:5] == layout and entry[5] <= conc <= entry[6] for entry in plain_space):
        return None
    return version


def mtp_draft_tokens(row: dict[str, str]) -> int:
    """``num_nextn_predict_layers`` of the TensorRT-LLM MTP scripts: 3, or 1 with attention DP."""
    return 1 if row_int(row, "attention_dp") > 1 else 3


def trtllm_mtp_options(row: dict[str, str], version: str) -> dict[str, Any]:
    """TRT-LLM flags of InferenceX's DeepSeek-R1 MTP launch scripts (``dsr1_*_trt_mtp*.sh``).

    Every version: ``--max_batch_size`` = CONC without attention DP (with it, each rank's limit as
    below), ``--max_num_tokens`` = ((MTP + 1) × max_batch_size + ISL + 64) rounded up to 64, block
    reuse off, no batch waiting, ``stream_interval`` 10 (no postprocess workers).
    With attention DP: PR 392's scripts (2026-01-14) give each rank CONC / TP requests; PR 632's
    fp8 B200 script CONC / 8 (CONC below 8: CONC) and a 0.7 memory fraction; PR 642's fp4 B200
    script CONC / 4 (CONC below 4: CONC).  Memory fraction 0.8, 0.75 on H200.
    """
    conc, isl = row_int(row, "concurrency"), row_int(row, "isl")
    tp = worker_gpus(row)
    dp = row_int(row, "attention_dp") > 1
    fraction = 0.75 if (row.get("system") or "").strip().lower() == "h200_sxm" else 0.8
    batch = conc
    if dp and version == "pr392":
        batch = max(1, conc // tp)
    elif dp and version == "pr632":
        batch, fraction = (conc if conc < 8 else conc // 8), 0.7
    elif dp and version == "pr642":
        batch = conc if conc < 4 else conc // 4
    k = mtp_draft_tokens(row)
    opts = {"enable_block_reuse": False, "max_batch_size": batch, "free_gpu_memory_fraction": fraction,
            "max_num_tokens": _round_up((k + 1) * batch + isl + 64, 64), "stream_interval": 10}
    precision = (row.get("precision") or "").strip().lower()
    if precision == "fp4":
        opts["moe_backend"] = "CUTLASS" if dp else "TRTLLM"  # dsr1_fp4_b200_trt_mtp.sh, every version
    elif (row.get("system") or "").strip().lower() == "h200_sxm":
        opts["moe_backend"] = "CUTLASS"  # dsr1_fp8_h200_trt_mtp.sh
    else:
        # dsr1_fp8_b200_trt_mtp.sh: DEEPGEMM in PR 392's version; from PR 632 TRTLLM, DEEPGEMM with
        # attention DP
        opts["moe_backend"] = "DEEPGEMM" if version == "pr392" or dp else "TRTLLM"
    return opts


#: The day InferenceX's DeepSeek-R1 FP4 B200 TensorRT-LLM script (``dsr1_fp4_b200_trt.sh``, commit
#: 6eecc0e66, PR 620) began to pick its MoE backend by attention DP alone.
FP4_MOE_BY_DP_FROM = "2026-02-03"


def trtllm_fp4_moe_backend(row: dict[str, str]) -> str:
    """``moe_config.backend`` of InferenceX's DeepSeek-R1 FP4 B200 TensorRT-LLM script for a row.

    From :data:`FP4_MOE_BY_DP_FROM`: CUTLASS with attention DP, else TRTLLM.  Before (the
    ``dsr1_fp4_b200_trt_slurm.sh`` versions of 2025-09-18 and 2025-11-03, then
    ``dsr1_fp4_b200_trt.sh`` from 2026-01-22): TRTLLM, except CUTLASS at TP 4 or 8 for 1k/1k and
    1k/8k at concurrency 256 and above, and for 8k/1k above 32."""
    conc, isl, osl = row_int(row, "concurrency"), row_int(row, "isl"), row_int(row, "osl")
    if (row.get("measured_date") or "").strip() >= FP4_MOE_BY_DP_FROM:
        return "CUTLASS" if row_int(row, "attention_dp") > 1 else "TRTLLM"
    if worker_gpus(row) in (4, 8) and ((isl, osl) in ((1024, 1024), (1024, 8192)) and conc >= 256
                                       or (isl, osl) == (8192, 1024) and conc > 32):
        return "CUTLASS"
    return "TRTLLM"


#: The days InferenceX's DeepSeek-R1 FP8 B200 TensorRT-LLM script moved its MoE backend from
#: DEEPGEMM to TRTLLM (commit ec7bafaae, PR 594; 1k/8k at concurrency 256 and above kept DEEPGEMM
#: until commit 626932a11).
FP8_MOE_TRTLLM_FROM = "2026-01-29"
FP8_MOE_ALL_TRTLLM_FROM = "2026-03-27"


def trtllm_fp8_moe_backend(row: dict[str, str]) -> str:
    """``moe_config.backend`` of InferenceX's DeepSeek-R1 FP8 TensorRT-LLM scripts for a row: the B200
    script's DEEPGEMM, then TRTLLM (:data:`FP8_MOE_TRTLLM_FROM`, :data:`FP8_MOE_ALL_TRTLLM_FROM`);
    the H200 script's CUTLASS."""
    if (row.get("system") or "").strip().lower() == "h200_sxm":
        return "CUTLASS"
    date = (row.get("measured_date") or "").strip()
    if date < FP8_MOE_TRTLLM_FROM:
        return "DEEPGEMM"
    if date < FP8_MOE_ALL_TRTLLM_FROM and (row_int(row, "isl"), row_int(row, "osl")) == (1024, 8192) \
            and row_int(row, "concurrency") >= 256:
        return "DEEPGEMM"
    return "TRTLLM"


def trtllm_inferencex_options(row: dict[str, str]) -> dict[str, Any] | None:
    """TRT-LLM flags of the InferenceX launch script that ran this row; None if no script covers it.

    Read from the stored versions of the scripts in SemiAnalysisAI/InferenceX.  The rows carry
    no script version; the scripts' git history was checked against the rows'
    ``measured_date`` where versions differ (Llama fp4: 16384 tokens from 2025-09-18; DeepSeek
    fp8 B200: the case-dependent memory fraction and batch waiting from 2026-01-29; DeepSeek's
    8,192-token floor from 2026-01-21; DeepSeek rows the MTP configs ran, :func:`inferencex_mtp_sweep`,
    take the MTP scripts' flags, :func:`trtllm_mtp_options`).  Every script sets
    ``enable_block_reuse: false`` and leaves chunked context off; a flag a script does not
    pass keeps TensorRT-LLM's default (the option's).
    """
    if not from_inferencex(row):
        return None
    mtp = inferencex_mtp_sweep(row)
    if mtp is not None:
        return trtllm_mtp_options(row, mtp)
    model = row["model"].lower()
    precision = (row.get("precision") or "").strip().lower()
    system = (row.get("system") or "").strip().lower()
    conc, isl, osl = row_int(row, "concurrency"), row_int(row, "isl"), row_int(row, "osl")
    tp = worker_gpus(row)  # the scripts' TP
    opts: dict[str, Any] = {"enable_block_reuse": False}
    if "deepseek" in model and (precision, system) in (("fp4", "b200_sxm"), ("fp8", "b200_sxm"),
                                                       ("fp8", "h200_sxm")):
        # benchmarks/dsr1_fp4_b200_trt.sh, dsr1_fp8_b200_trt.sh, dsr1_fp8_h200_trt.sh:
        # --max_num_tokens = max(8192, (CONC + ISL + 64) rounded up to 64) from 2026-01-21
        # (commit 64af5a771, PR 258); before, the *_trt_slurm.sh versions passed the round-up
        # alone (1,152 for 1k/1k at CONC 64); no --max_batch_size
        # (TensorRT-LLM's 2048); kv_cache_config.free_gpu_memory_fraction 0.8 (fp4 B200),
        # 0.75 (fp8 H200), fp8 B200: 0.8, and from 2026-01-29 (ec7bafaae, PR 594) 0.7 for 1k/8k
        # at CONC >= 256 and 0.75 for 8k/1k at TP 4, and for 1k/1k at CONC >= 64 DELAY_BATCHING:
        # batch_wait_timeout_iters 40, batch_wait_max_tokens_ratio 0.8 (the executor skips
        # batch waiting with attention DP).  Every version streams with stream_interval 10 and no
        # postprocess workers.  Each picks its MoE backend (trtllm_fp4_moe_backend,
        # trtllm_fp8_moe_backend).  DeepSeek-V3 rows are taken as run by the same scripts.
        date = (row.get("measured_date") or "").strip()
        tokens = _round_up(conc + isl + 64, 64)
        opts["max_num_tokens"] = tokens if date < "2026-01-21" else max(8192, tokens)
        fraction = 0.8
        if precision == "fp8" and system == "h200_sxm":
            fraction = 0.75
        elif precision == "fp8" and date >= "2026-01-29":
            if isl == 1024 and osl == 8192 and conc >= 256:
                fraction = 0.7
            elif isl == 8192 and osl == 1024 and tp == 4:
                fraction = 0.75
            if isl == 1024 and osl == 1024 and conc >= 64:
                opts.update(batch_wait_timeout_iters=40, batch_wait_max_tokens_ratio=0.8)
        opts["free_gpu_memory_fraction"] = fraction
        opts["stream_interval"] = 10
        opts["moe_backend"] = trtllm_fp4_moe_backend(row) if precision == "fp4" else trtllm_fp8_moe_backend(row)
        return opts
    if "gpt-oss" in model and system in ("b200_sxm", "h200_sxm"):
        # benchmarks/gptoss_fp4_b200_trt.sh: --max_batch_size 512 --max_num_tokens 20000;
        # benchmarks/gptoss_fp4_h200_trt.sh: --max_batch_size $CONC --max_num_tokens 20000;
        # both free_gpu_memory_fraction 0.85, stream_interval 20, num_postprocess_workers 4;
        # moe_config.backend TRTLLM (B200; from 2025-10-20, before these rows) and TRITON (H200)
        opts.update(max_num_tokens=20000, max_batch_size=512 if system == "b200_sxm" else conc,
                    free_gpu_memory_fraction=0.85, stream_interval=20, num_postprocess_workers=4,
                    moe_backend="TRTLLM" if system == "b200_sxm" else "TRITON")
        return opts
    if "llama-3.1-70b" in model and system in ("b200_sxm", "h200_sxm"):
        # benchmarks/70b_fp8_b200_trt_slurm.sh, 70b_fp8_h200_trt_slurm.sh,
        # 70b_fp4_b200_trt_slurm.sh: --max_num_tokens 16384 (the fp4 script's first version,
        # 2025-09-17, passed $MAX_MODEL_LEN; from 2025-09-18 until the scripts were removed on
        # 2025-10-29, around these rows' 2025-10 runs, all three pass 16384); no
        # --max_batch_size (2048), the default memory fraction; 1k/1k at TP < 8 adds
        # batch_wait_max_tokens_ratio 0.9, batch_wait_timeout_iters 20
        opts["max_num_tokens"] = 16384
        if isl == 1024 and osl == 1024 and tp < 8:
            opts.update(batch_wait_timeout_iters=20, batch_wait_max_tokens_ratio=0.9)
        return opts
    return None


def trtllm_options(row: dict[str, str]) -> dict[str, Any]:
    """The TensorRT-LLM engine section of a point (without its name): the InferenceX script's flags
    where one covers the row, else the README's; plus the scripts' ADP balance with attention DP."""
    opts = trtllm_inferencex_options(row)
    if opts is None:
        # rows no InferenceX script covers (e.g. NVIDIA's fixed_lengths_unverified):
        # max_batch_size = concurrency, max_num_tokens = the run's max model length
        # (isl + osl + a margin, e.g. 2248 for 1k/1k), chunked context and block reuse off
        isl, osl = row_int(row, "isl"), row_int(row, "osl")
        opts = {"max_batch_size": row_int(row, "concurrency"), "enable_block_reuse": False,
                "max_num_tokens": max(2048, isl + osl + 200)}
    if row_int(row, "attention_dp") > 1:
        # InferenceX launch scripts add attention_dp_config whenever DP_ATTENTION is true:
        # DeepSeek-R1 (benchmarks/dsr1_fp4_b200_trt.sh, dsr1_fp8_b200_trt.sh,
        # dsr1_fp8_h200_trt.sh): enable_balance true, timeout_iters 60, batching_wait_iters 0;
        # gpt-oss (benchmarks/gptoss_fp4_b200_trt.sh): enable_balance true with
        # TensorRT-LLM's defaults (timeout_iters 50, batching_wait_iters 10)
        opts["attention_dp_enable_balance"] = True
        if "deepseek" in row["model"].lower():
            opts.update(attention_dp_timeout_iters=60, attention_dp_batching_wait_iters=0)
    return opts


def trtllm_kv_dtype(row: dict[str, str]) -> str:
    """KV precision of a TensorRT-LLM row: fp8 with fp8 / fp4 weights (quantized checkpoints carry
    an fp8 KV cache), else bf16, except where the InferenceX script says otherwise.
    ``gptoss_fp4_h200_trt_slurm.sh`` (2025-11, 2025-12 versions) sets ``kv_cache_config.dtype:
    auto`` and the mxfp4 checkpoint carries no KV quantisation, so the cache is bf16 (the B200
    script sets ``dtype: fp8``)."""
    system = (row.get("system") or "").strip().lower()
    precision = (row.get("precision") or "").strip().lower() or "bf16"
    if "gpt-oss" in row["model"].lower() and system == "h200_sxm" and from_inferencex(row):
        return "bf16"
    return "fp8" if precision in ("fp8", "fp4") else "bf16"
