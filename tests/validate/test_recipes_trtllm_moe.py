"""InferenceX's DeepSeek-R1 FP4 B200 TensorRT-LLM scripts' MoE backend, by the row's date and layout."""

from __future__ import annotations

import pytest

from servesim.validate.recipes.trtllm import trtllm_fp4_moe_backend, trtllm_inferencex_options


def _row(date, tp=8, dp=1, conc=64, isl=1024, osl=1024, precision="fp4", model="deepseek-ai/DeepSeek-R1"):
    return {"id": "x", "model": model, "system": "b200_sxm", "backend": "trtllm", "precision": precision,
            "gpus": str(tp), "attention_tp": str(tp // dp if dp > 1 else tp), "attention_dp": str(dp),
            "moe_tp": "1", "moe_ep": str(tp), "concurrency": str(conc), "isl": str(isl), "osl": str(osl),
            "workload": "inferencex_random", "source": "aic_silicon_sample/inferencex", "measured_date": date,
            "quality": "confirmed: no speculative decoding"}


@pytest.mark.parametrize("row,backend", [
    # from 2026-02-03 (PR 620): CUTLASS with attention DP, else TRTLLM
    (_row("2026-02-03", dp=8), "CUTLASS"), (_row("2026-05-19", conc=512), "TRTLLM"),
    # before: TRTLLM, CUTLASS at TP 4 / 8 for 1k/1k and 1k/8k at 256+, 8k/1k above 32
    (_row("2025-11-02", conc=256), "CUTLASS"), (_row("2025-11-02", conc=128), "TRTLLM"),
    (_row("2026-01-14", isl=8192, osl=1024, conc=64, tp=4), "CUTLASS"),
    (_row("2026-01-14", isl=8192, osl=1024, conc=32, tp=4), "TRTLLM"),
    (_row("2025-12-15", dp=8, conc=64), "TRTLLM"),  # attention DP did not pick the backend then
])
def test_fp4_moe_backend_follows_the_script_of_the_rows_date(row, backend):
    assert trtllm_fp4_moe_backend(row) == backend
    assert trtllm_inferencex_options(row)["moe_backend"] == backend


@pytest.mark.parametrize("date,conc,isl,osl,system,backend", [
    ("2025-11-02", 64, 1024, 1024, "b200_sxm", "DEEPGEMM"),  # before PR 594
    ("2026-02-05", 64, 1024, 1024, "b200_sxm", "TRTLLM"),
    ("2026-02-05", 256, 1024, 8192, "b200_sxm", "DEEPGEMM"),  # kept until 2026-03-27
    ("2026-05-18", 256, 1024, 8192, "b200_sxm", "TRTLLM"),
    ("2026-02-05", 64, 1024, 1024, "h200_sxm", "CUTLASS"),
])
def test_fp8_moe_backend_follows_the_script_of_the_rows_date(date, conc, isl, osl, system, backend):
    row = _row(date, conc=conc, isl=isl, osl=osl, precision="fp8") | {"system": system}
    assert trtllm_inferencex_options(row)["moe_backend"] == backend
