"""SGLang's flags for a measured row, and ATOM's, which servesim simulates with SGLang's scheduler.

SGLang rows take the README's typical flags (radix cache off, 32768-token chunks and prefill
budget, ``mem_fraction_static`` 0.82), and for DeepSeek the running-request limit and the
InferenceX DeepSeek scripts' flags on Blackwell and H200 (:func:`_sglang_deepseek_script_flags`).
ATOM (AMD's ROCm engine, nano-vLLM lineage) is modelled by the closest scheduler, SGLang's
(``rows.BACKEND_AS_ENGINE``), so its defaults are written as SGLang options here
(:func:`atom_options`).
"""

from __future__ import annotations

from typing import Any

from servesim.hardware import load_gpu
from servesim.validate.recipes.rows import from_inferencex, row_int

def _sglang_deepseek_script_flags(row: dict[str, str]) -> dict[str, Any]:
    """SGLang flags of InferenceX's DeepSeek launch scripts that differ from the README's typical ones.

    Blackwell (``dsr1_fp4_b200.sh``, ``dsr1_fp8_b200.sh``, ``dsr1_fp8_b300.sh``; attention dp off):
    ``--scheduler-recv-interval`` 30 at concurrency >= 16, else 10 (always 10 for fp8 at tp 4).
    fp4, every version 2025-11 .. 2026-05: ``--mem-fraction-static 0.85 --chunked-prefill-size
    16384 --max-running-requests 256`` and no ``--max-prefill-tokens`` (SGLang's 16384).  fp8 at tp 4
    (the scripts' only tp 4 case; B200 ran tp 4 from 2026-01-13, B300's script dates from 2026-04-17,
    so no earlier tp 4 row exists): 32 running requests, 0.95, chunk and prefill budget 8192.  fp8 at
    tp 8 the scripts say 128 running requests (0.82 and 32768 as the README), but the rows at
    concurrency 256 contradict it (B200 DeepSeek-R1 1k/1k c256: 2.1 s mean TTFT measured, where
    128 seats would queue half the requests for a ~30 s lifetime; those rows are not in the plain
    config's sweep of that date, which stops at 64: they are MTP runs of ``dsr1-fp8-b200-sglang-mtp``,
    512 running requests, simulated plain, see
    :data:`~servesim.validate.recipes.trtllm.INFERENCEX_MIXED_MTP_SWEEPS`), so tp 8 keeps the
    README's rule.  H200 fp8
    (``dsr1_fp8_h200.sh``, 2025-10 .. 2026-06): 512 running requests for 1k/1k, else 256.
    """
    conc = row_int(row, "concurrency")
    precision = (row.get("precision") or "").lower()
    system = row["system"]
    opts: dict[str, Any] = {}
    if system in ("b200_sxm", "b300_sxm") and row_int(row, "attention_dp") <= 1:
        tp4 = row_int(row, "gpus") == 4
        opts["scheduler_recv_interval"] = 30 if conc >= 16 and not (tp4 and precision == "fp8") else 10
        if not from_inferencex(row):
            return opts
        if precision == "fp4":
            opts.update(mem_fraction_static=0.85, chunked_prefill_size=16384, max_prefill_tokens=16384,
                        max_running_requests=256)
        elif precision == "fp8" and tp4:
            opts.update(mem_fraction_static=0.95, chunked_prefill_size=8192, max_prefill_tokens=8192,
                        max_running_requests=32)
    elif system == "h200_sxm" and precision == "fp8" and from_inferencex(row):
        one_k = row_int(row, "isl") == 1024 and row_int(row, "osl") == 1024
        opts["max_running_requests"] = 512 if one_k else 256
    return opts



def sglang_options(row: dict[str, str]) -> dict[str, Any]:
    """The SGLang engine section of a point (without its name), from the README's documented
    server flags and, for DeepSeek, its scripts' (:func:`_sglang_deepseek_script_flags`)."""
    opts: dict[str, Any] = {"disable_radix_cache": True, "chunked_prefill_size": 32768, "max_prefill_tokens": 32768,
                            "mem_fraction_static": 0.82}
    if "deepseek" in row["model"].lower():
        opts["max_running_requests"] = min(512, max(256, row_int(row, "concurrency")))
        opts.update(_sglang_deepseek_script_flags(row))
    return opts


def atom_options(row: dict[str, str]) -> dict[str, Any]:
    """ATOM's engine section as SGLang options (without its name).

    ATOM's defaults (nano-vLLM lineage): 16384 batched tokens, 512 sequences,
    gpu_memory_utilization 0.9; benchmarks ran without prefix caching.
    """
    return {"disable_radix_cache": True, "chunked_prefill_size": 16384, "max_prefill_tokens": 16384,
            "mem_fraction_static": 0.9, "max_running_requests": max(512, row_int(row, "concurrency"))}


def sglang_kv_dtype(precision: str, gpu: str | None) -> str | None:
    """KV precision of an SGLang point; None leaves SGLang's ``auto``.

    The InferenceX launch scripts for quantized DeepSeek-family models on Blackwell pass
    ``--kv-cache-dtype fp8_e4m3`` (``benchmarks/single_node/dsr1_fp8_b200.sh``,
    ``dsr1_fp4_b200.sh``), those for Hopper do not (``dsr1_fp8_h200.sh``); elsewhere SGLang
    stays on ``auto`` (see ``cluster.deployment.default_kv_dtype``).
    """
    if gpu and precision in ("fp8", "fp4") and (load_gpu(gpu).cuda_major or 0) >= 10:
        return "fp8"
    return None


#: ATOM's KV precision (its documented usage).
ATOM_KV_DTYPE = "fp8"
