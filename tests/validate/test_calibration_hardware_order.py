"""Switching GPU in a prediction compares hardware, not calibration groups.

The shipped calibration fits each GPU/engine group on its own rows.  Fitted knobs that absorb
a client's or a campaign's quirks can make a faster GPU predict slower than a slower one (a
past calibration put H200's SGLang TTFT above H100's through a 160 ms first-token overhead of
its group).  Here the same deployment, on H100, H200 (same compute, 1.4x the HBM bandwidth)
and B200 (newer, faster in both), must come out in that order.
"""

from __future__ import annotations

import pytest

from servesim.api import predict

GPUS = ("h100_sxm", "h200_sxm", "b200_sxm")


def _means(model: str, engine: str, tp: int, gpu: str) -> tuple[float, float]:
    cfg = {"seed": 0,
           "deployment": {"model": model, "gpu": gpu, "tp": tp, "workers": 1, "engine": {"name": engine}},
           "workload": {"kind": "closed_loop", "recipe": "fixed", "concurrency": 16, "isl": 1024, "osl": 128,
                        "num_prompts": 64, "warmup": 0},
           "perf": {"calibration": "default"}, "output": {"dir": None}}
    lat = predict(cfg).summary["latency"]
    return lat["ttft_ms"]["mean"], lat["tpot_ms"]["mean"]


@pytest.mark.parametrize("model,engine,tp", [("meta-llama/Llama-3.1-8B-Instruct", "sglang", 1),
                                             ("meta-llama/Llama-3.1-8B-Instruct", "vllm", 1),
                                             ("meta-llama/Llama-3.1-70B", "trtllm", 4)])
def test_faster_gpu_predicts_faster(model, engine, tp):
    (t100, p100), (t200, p200), (tb, pb) = (_means(model, engine, tp, g) for g in GPUS)
    assert p200 < p100 and pb < p200, (p100, p200, pb)  # decode: memory bound, H200 has 1.4x the bandwidth
    assert t200 <= 1.1 * t100 and tb < t200, (t100, t200, tb)  # prefill: same compute on H100 and H200
