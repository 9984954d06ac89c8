"""benchmarks/measurement_repeatability.py: the error floor that runs of one deployment which
disagree put under any simulator giving that deployment one prediction."""

from __future__ import annotations

import pandas as pd
import pytest

from benchscripts import load_benchmark


def _row(id_, model, ttft, tpot, version="1", concurrency=8):
    return {"id": id_, "model": model, "system": "h100_sxm", "backend": "vllm", "backend_version": version,
            "precision": "fp8", "gpus": 8, "attention_tp": 8, "attention_dp": 1, "moe_tp": 8, "moe_ep": 1,
            "concurrency": concurrency, "isl": 1024, "osl": 1024,
            "measured_mean_ttft_ms": ttft, "measured_mean_tpot_ms": tpot}


@pytest.fixture(scope="module")
def rep():
    return load_benchmark("measurement_repeatability")


def test_floor_is_the_best_single_prediction_of_each_deployment(rep):
    """Two checkpoints of one architecture measured at 100 and 200 ms: the best one number is
    100 (0 and 50% off; 200 would be 100% and 0 off); with a third run of 100 ms it stays 100
    (0, 0, 50%); a deployment measured once has no floor."""
    pts = pd.DataFrame([_row("a", "deepseek-ai/DeepSeek-V3", 100.0, 10.0),
                        _row("b", "deepseek-ai/DeepSeek-R1", 200.0, 10.0, version="2"),
                        _row("c", "meta-llama/Llama-3.1-8B-Instruct", 50.0, 5.0)])
    fl = rep.floors(pts).set_index("id")
    assert fl.loc["c", "ttft"] == 0.0 and fl.loc["c", "runs"] == 1
    assert sorted(fl.loc[["a", "b"], "ttft"]) == [0.0, 0.5]
    assert (fl.tpot == 0.0).all()
    three = rep.floors(pd.concat([pts, pd.DataFrame([_row("d", "deepseek-ai/DeepSeek-V3", 100.0, 10.0)])]))
    assert sorted(three.set_index("id").loc[["a", "b", "d"], "ttft"]) == [0.0, 0.0, 0.5]


def test_pairs_skip_one_run_copied_twice_and_other_deployments(rep):
    """Identical measurements are one run in two sources (no pair); another concurrency is
    another deployment (no pair); two distinct runs give two ordered pairs."""
    pts = pd.DataFrame([_row("a", "openai/gpt-oss-120b", 100.0, 10.0), _row("a2", "openai/gpt-oss-120b", 100.0, 10.0),
                        _row("b", "openai/gpt-oss-120b", 150.0, 12.0),
                        _row("x", "openai/gpt-oss-120b", 999.0, 99.0, concurrency=64)])
    pairs = rep.run_pairs(pts)
    assert len(pairs) == 4  # a-b, b-a, a2-b, b-a2
    ab = pairs[pairs.id == "a"].iloc[0]
    assert ab.ttft == pytest.approx(0.5) and ab.tpot == pytest.approx(0.2)
