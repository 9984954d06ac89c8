"""The sensitivity calibration: surrogate arithmetic, file round trip, and recovery of known values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servesim.validate.groupfit import GroupParams, fit_hierarchy
from servesim.validate.points import Point
from servesim.validate.sensitivity import (DEFAULT_BASE, KNOBS, PointSensitivity, read_sensitivities,
                                           write_sensitivities)


def _point(i: int, gpu: str, engine: str, model: str, precision: str = "fp8") -> Point:
    row = {"id": f"p{i}", "system": gpu, "backend": engine, "model": model, "precision": precision,
           "workload": "inferencex_random", "measured_mean_ttft_ms": "1", "measured_mean_tpot_ms": "1"}
    return Point(row, {}, "ok")


def _synthetic(truth: dict[str, GroupParams], n_per_group: int = 12, seed: int = 0) -> list[PointSensitivity]:
    """Points whose response is exactly the linear surrogate; 'measured' = surrogate at the true values."""
    rng = np.random.default_rng(seed)
    out = []
    i = 0
    for key, g in truth.items():
        gpu, engine, model = key.split("/", 2)
        for _ in range(n_per_group):
            p = _point(i, gpu, engine, model)
            i += 1
            s = PointSensitivity(p, "ok", ttft_base=float(rng.uniform(50, 500)), tpot_base=float(rng.uniform(5, 40)))
            # slopes: ms per unit of each knob, physically signed (slower scales → longer times)
            s.ttft_slope = {"mem": float(rng.uniform(5, 100)), "prefill": float(rng.uniform(20, 300)),
                            "sched": float(rng.uniform(1e3, 2e4))}
            s.tpot_slope = {"mem": s.tpot_base * float(rng.uniform(0.4, 0.8)), "prefill": float(rng.uniform(0, 2)),
                            "sched": float(rng.uniform(900, 1100))}
            ttft, tpot = s.predict(math.exp(g.log_mem), math.exp(g.log_prefill),
                                   g.sched_s - DEFAULT_BASE.scheduler_pass_s, g.stream_s)
            p.row["measured_mean_ttft_ms"] = str(ttft)
            p.row["measured_mean_tpot_ms"] = str(tpot)
            out.append(s)
    return out


def test_surrogate_is_linear_in_the_knobs():
    s = PointSensitivity(_point(0, "h200_sxm", "vllm", "m"), "ok", ttft_base=100.0, tpot_base=10.0,
                         ttft_slope={"mem": 10.0, "prefill": 50.0, "sched": 1000.0},
                         tpot_slope={"mem": 6.0, "prefill": 1.0, "sched": 1000.0})
    assert s.predict(1.0, 1.0, 0.0, 0.0) == (100.0, 10.0)
    ttft, tpot = s.predict(1.5, 1.0, 0.002, 0.03)
    assert math.isclose(ttft, 100 + 5 + 2 + 30) and math.isclose(tpot, 10 + 3 + 2)


@pytest.mark.parametrize("prior_scale,tol", [(0.0, 0.01), (1.0, 0.1)])
def test_fit_recovers_known_group_values(prior_scale, tol):
    """Without priors the values are recovered exactly; the default priors bias them a little."""
    truth = {"h200_sxm/vllm/org/A": GroupParams(math.log(1.4), math.log(1.1), 0.001, 0.08),
             "b200_sxm/trtllm/org/B": GroupParams(math.log(0.8), math.log(1.3), 0.004, 0.15)}
    sens = _synthetic(truth, n_per_group=30)
    cal = fit_hierarchy(sens, DEFAULT_BASE, min_group_points=5, min_model_points=3, prior_scale=prior_scale)
    for key, g in truth.items():
        gpu, engine, model = key.split("/", 2)
        want_a, want_f = g.overrides(DEFAULT_BASE)
        got_a, got_f = cal.resolve(gpu, engine, model, "fp8")
        assert math.isclose(got_a["mem_eff"], want_a["mem_eff"], rel_tol=tol), key
        assert math.isclose(got_a["gemm_eff_max"], want_a["gemm_eff_max"], rel_tol=tol), key
        assert math.isclose(got_f["scheduler_pass_s"], want_f["scheduler_pass_s"], rel_tol=3 * tol), key
        assert math.isclose(got_f["first_token_overhead_s"], want_f["first_token_overhead_s"], rel_tol=tol), key
        assert f"{gpu}/{engine}/{model}@fp8" in cal.groups


def test_small_model_groups_keep_their_parent():
    truth = {"h200_sxm/vllm/org/A": GroupParams(math.log(1.4), 0.0, 0.001, 0.08)}
    sens = _synthetic(truth, n_per_group=12)
    lonely = _synthetic({"h200_sxm/vllm/org/Lonely": GroupParams(math.log(0.7), 0.0, 0.0, 0.5)}, n_per_group=2,
                        seed=1)
    for s in lonely:
        s.point.row["id"] += "-lonely"
    cal = fit_hierarchy(sens + lonely, DEFAULT_BASE, min_group_points=5, min_model_points=3)
    assert "h200_sxm/vllm/org/Lonely@fp8" not in cal.groups
    assert cal.resolve("h200_sxm", "vllm", "org/Lonely", "fp8") == cal.resolve("h200_sxm", "vllm")


def test_sensitivities_round_trip(tmp_path):
    sens = _synthetic({"h200_sxm/vllm/org/A": GroupParams()}, n_per_group=3)
    sens.append(PointSensitivity(_point(99, "h200_sxm", "vllm", "org/A"), "error: boom"))
    path = tmp_path / "s.csv"
    write_sensitivities(sens, path)
    again = read_sensitivities(path, [s.point for s in sens] + [_point(100, "x", "y", "z")])
    for a, b in zip(sens, again):
        assert a.status == b.status
        if a.status == "ok":
            assert math.isclose(a.ttft_base, b.ttft_base) and all(
                math.isclose(a.tpot_slope[k], b.tpot_slope[k]) for k in KNOBS)
    assert again[-1].status.startswith("error: not in")
