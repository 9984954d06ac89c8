"""Prediction intervals: cross-validated error bands in the calibration, reported by predict."""

from __future__ import annotations

import pytest

from servesim.api import predict
from servesim.perf.calibration import Calibration, parse_calibration, prediction_interval
from servesim.validate.crossval import error_bands
from servesim.validate.groupfit import fit_hierarchy
from servesim.validate.sensitivity import DEFAULT_BASE

from test_groupfit import _rel, _synthetic

pytest.importorskip("scipy")


def _sens():
    truth = {}
    for m in ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-32B", "openai/gpt-oss-120b"):
        truth[f"h100_sxm/vllm/{m}"] = _rel(0.85, 1.1, 0.002, 0.02)
        truth[f"b200_sxm/vllm/{m}"] = _rel(0.8, 1.15, 0.001, 0.02)
    sens = _synthetic(truth, n_per_group=10)
    rng = __import__("numpy").random.default_rng(5)
    for s in sens:  # measurement noise: held-out errors are not all zero
        for col in ("measured_mean_ttft_ms", "measured_mean_tpot_ms"):
            s.point.row[col] = str(float(s.point.row[col]) * float(rng.normal(1.0, 0.08)))
    return sens


def test_error_bands_cover_each_situation_and_lookup_picks_the_deployments():
    sens = _sens()
    bands = error_bands(sens, lambda tr: fit_hierarchy(tr, DEFAULT_BASE, min_group_points=5))
    assert set(bands) >= {"coverage", "basis", "seen", "unseen_model", "unseen_gpu"}
    for situation in ("seen", "unseen_model", "unseen_gpu"):
        band = bands[situation]["*"]
        assert band["n"] == len(sens)
        assert band["ttft_lo"] < 0 < band["ttft_hi"] and band["tpot_lo"] < band["tpot_hi"]
    assert "h100_sxm/vllm" in bands["seen"] and "*/vllm" in bands["unseen_gpu"]
    cal = fit_hierarchy(sens, DEFAULT_BASE, min_group_points=5)
    cal.intervals = bands
    cal = parse_calibration(cal.to_dict())  # survives the file round trip
    seen = cal.error_band("h100_sxm", "vllm", "Qwen/Qwen3-32B", "fp8")
    assert seen["situation"] == "seen" and seen["group"] == "h100_sxm/vllm"
    assert cal.error_band("h100_sxm", "vllm", "org/Unknown", "fp8")["situation"] == "unseen_model"
    assert cal.error_band("h200_sxm", "vllm", "Qwen/Qwen3-32B", "fp8")["situation"] == "unseen_gpu"
    assert cal.error_band("mi300x", "vllm")["group"] == "*/vllm"
    assert Calibration().error_band("h100_sxm", "vllm") is None


def test_error_band_situation_agrees_with_what_the_file_measured():
    """A hand-written file with a model group on a GPU but no GPU/engine group there: the GPU is
    calibrated for that engine (``measured``), so the band is its, not the unseen-GPU band."""
    band = {"n": 3, "ttft_lo": -0.1, "ttft_hi": 0.1, "ttft_mape": 0.05, "tpot_lo": -0.1, "tpot_hi": 0.1,
            "tpot_mape": 0.05}
    cal = parse_calibration({"version": 1, "groups": {"h200_sxm/vllm/Qwen/Qwen3-32B@fp8": {"analytic": {"mem_eff": 0.8}}},
                             "intervals": {s: {"*": band} for s in ("seen", "unseen_model", "unseen_gpu")}})
    for model, situation in (("Qwen/Qwen3-32B", "seen"), ("org/Other", "unseen_model")):
        assert cal.measured("h200_sxm", "vllm", model, "fp8") == (situation == "seen")
        assert cal.error_band("h200_sxm", "vllm", model, "fp8")["situation"] == situation
    assert not cal.measured("h100_sxm", "vllm", "Qwen/Qwen3-32B", "fp8")
    assert cal.error_band("h100_sxm", "vllm", "Qwen/Qwen3-32B", "fp8")["situation"] == "unseen_gpu"


def test_interval_brackets_the_prediction():
    band = {"situation": "seen", "basis": "halves", "group": "g", "coverage": 0.8, "n": 20,
            "ttft_lo": -0.2, "ttft_hi": 0.25, "ttft_mape": 0.1, "tpot_lo": -0.1, "tpot_hi": 0.05, "tpot_mape": 0.04}
    pi = prediction_interval({"ttft_ms": {"mean": 100.0}, "tpot_ms": {"mean": 10.0}}, band)
    assert pi["ttft_ms"]["low"] == pytest.approx(80.0) and pi["ttft_ms"]["high"] == pytest.approx(125.0)
    assert pi["tpot_ms"]["low"] < 10.0 < pi["tpot_ms"]["high"]
    assert prediction_interval({}, None)["available"] is False


def test_predict_reports_the_interval_of_the_shipped_calibration():
    cfg = {"seed": 0, "workload": {"kind": "closed_loop", "recipe": "fixed", "concurrency": 2, "isl": 500, "osl": 8,
                                   "num_prompts": 4, "warmup": 0},
           "deployment": {"model": "meta-llama/Llama-3.1-70B", "gpu": "h200_sxm", "engine": "vllm",
                          "tp": 2, "weight_dtype": "fp8"},
           "output": {"dir": None}}
    pi = predict(cfg).summary["prediction_interval"]
    assert pi["available"], pi
    assert pi["ttft_ms"]["low"] < pi["ttft_ms"]["mean"] < pi["ttft_ms"]["high"]
    assert pi["tpot_ms"]["low"] < pi["tpot_ms"]["mean"] < pi["tpot_ms"]["high"]
    off = predict(cfg | {"perf": {"calibration": None}}).summary["prediction_interval"]
    assert off["available"] is False and "no calibration" in off["reason"]
