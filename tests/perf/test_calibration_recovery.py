"""Calibration recovers known parameters from points simulated with them."""

from __future__ import annotations

import time

import pytest

from servesim.validate.calibrate import FitParam, PointEvaluator, _fit_counts, calibrate, fit_params
from servesim.validate.points import point_config
from servesim.validate.simulate import simulate_point

TRUE_ANALYTIC = {"mem_eff": 0.55}
TRUE_FRONTEND = {"first_token_overhead_s": 0.06, "tokenize_per_token_s": 4e-6}
FIT = (
    FitParam("analytic", "mem_eff", 0.85, 0.1, 1.0),
    FitParam("frontend", "first_token_overhead_s", 0.02, 1e-4, 1.0),
    FitParam("frontend", "tokenize_per_token_s", 1e-6, 1e-8, 1e-4),
)


def _row(i: int, conc: int, isl: int, osl: int) -> dict:
    return {"id": f"syn{i}", "model": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm",
            "backend": "sglang", "precision": "", "mode": "agg", "gpus": "1", "pp": "1", "attention_tp": "1",
            "attention_dp": "1", "moe_tp": "1", "moe_ep": "1", "concurrency": str(conc), "isl": str(isl),
            "osl": str(osl), "workload": "inferencex_random", "range_ratio": "0.8", "num_prompts": str(10 * conc),
            "measured_mean_ttft_ms": "1", "measured_mean_tpot_ms": "1"}


def _synthetic_points(fit_prompts: int):
    points = []
    for i, (conc, isl, osl) in enumerate([(1, 512, 32), (4, 2048, 32), (16, 1024, 24), (32, 4096, 16)]):
        p = point_config(_row(i, conc, isl, osl))
        n, w = _fit_counts(p, fit_prompts)
        r = simulate_point(p.config, TRUE_ANALYTIC, TRUE_FRONTEND, num_prompts=n, warmup=w)
        p.row["measured_mean_ttft_ms"] = str(r.ttft_ms)
        p.row["measured_mean_tpot_ms"] = str(r.tpot_ms)
        points.append(p)
    return points


def test_recovers_known_parameters():
    t0 = time.perf_counter()
    points = _synthetic_points(2)
    ev = PointEvaluator(points, fit_prompts=2)
    # the tokenizer cost is known; the GPU efficiency and the stream latency are recovered
    base = ({}, {"tokenize_per_token_s": TRUE_FRONTEND["tokenize_per_token_s"]})
    a, f, rms = fit_params(ev, base, FIT[:2], max_nfev=20)
    assert rms < 0.01
    assert a["mem_eff"] == pytest.approx(TRUE_ANALYTIC["mem_eff"], rel=0.05)
    assert f["first_token_overhead_s"] == pytest.approx(TRUE_FRONTEND["first_token_overhead_s"], rel=0.1)
    assert time.perf_counter() - t0 < 60  # < 30 s on an idle machine


def test_calibrate_writes_shared_and_group(tmp_path):
    points = _synthetic_points(2)
    cal = calibrate(points, sample=None, fit_prompts=2, min_group_points=4, max_nfev=3, fit=FIT[:1])
    assert "mem_eff" in cal.shared["analytic"]
    assert set(cal.groups) == {"h100_sxm/sglang"}
    cal.save(tmp_path / "c.yaml")
    assert (tmp_path / "c.yaml").read_text().startswith("version: 1")
