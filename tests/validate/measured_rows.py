"""A calibration.csv-format row for the validate tests: one InferenceX DeepSeek-V3 point, overridable."""

from __future__ import annotations

BASE = {"id": "p1", "source": "x/inferencex", "quality": "", "model": "deepseek-ai/DeepSeek-V3",
        "system": "h200_sxm", "backend": "sglang", "backend_version": "", "image": "", "precision": "fp8",
        "mode": "agg", "gpus": "8", "pp": "1", "attention_tp": "8", "attention_dp": "1", "moe_tp": "1",
        "moe_ep": "8", "parallel_note": "", "concurrency": "16", "isl": "1024", "osl": "1024",
        "workload": "inferencex_random", "range_ratio": "0.8", "num_prompts": "160",
        "measured_mean_ttft_ms": "285.9", "measured_mean_tpot_ms": "16.6"}


def row(**kw) -> dict:
    """BASE with the given columns replaced (values as the CSV reader gives them: strings)."""
    r = dict(BASE)
    r.update({k: str(v) for k, v in kw.items()})
    return r
