"""Leave-one-family-out / leave-one-GPU-out cross-validation (servesim.validate.crossval)."""

from __future__ import annotations

import pytest

from servesim.validate.crossval import cross_validate, fold_of, in_sample, model_family
from servesim.validate.groupfit import fit_hierarchy


from test_groupfit import DEFAULT_BASE, _rel, _synthetic

pytest.importorskip("scipy")


def _fit(train):
    return fit_hierarchy(train, DEFAULT_BASE, min_group_points=4, prior_scale=0.0)


@pytest.mark.parametrize("model,family", [
    ("deepseek-ai/DeepSeek-R1-0528", "DeepSeek-V3"), ("nvidia/DeepSeek-V3.1-NVFP4", "DeepSeek-V3"),
    ("meta-llama/Llama-3.1-8B-Instruct", "Llama-3"), ("nvidia/Llama-3.1-8B-Instruct-FP8", "Llama-3"),
    ("Qwen/Qwen3-235B-A22B-FP8", "Qwen3"), ("Qwen/Qwen3-32B", "Qwen3"), ("openai/gpt-oss-120b", "gpt-oss"),
    ("MiniMaxAI/MiniMax-M2.5", "MiniMax-M2"), ("moonshotai/Kimi-K2.5", "Kimi-K2"), ("zhipuai/GLM-5", "GLM"),
    ("org/Foo-7B", "Foo"),
])
def test_model_family(model, family):
    assert model_family(model) == family


def _two_gpus_same_values():
    # no scheduler CPU time: a measured deployment's own, not carried to held-out ones
    # (Calibration.resolve), so only the transferable values are shared here
    same = _rel(1.2, 1.1, 0.0, 0.02)
    truth = {f"{gpu}/vllm/{m}": same for gpu in ("h100_sxm", "b200_sxm")
             for m in ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-32B", "openai/gpt-oss-120b")}
    return _synthetic(truth, n_per_group=6)


def test_every_point_is_held_out_exactly_once():
    sens = _two_gpus_same_values()
    for kind in ("family", "gpu"):
        res = cross_validate(sens, kind, _fit)
        assert sorted(r.id for r in res.rows) == sorted(s.point.id for s in sens)
        assert {r.fold for r in res.rows} == {fold_of(s, kind) for s in sens}
        for r in res.rows:  # each row scored by the fit that did not see its fold
            assert r.fold == fold_of(next(s for s in sens if s.point.id == r.id), kind)
    split = cross_validate(sens, "split", _fit)
    assert {r.fold for r in split.rows} == {"holdout"}
    assert 0 < len(split.rows) < len(sens)


def test_values_shared_by_every_group_transfer_to_held_out_folds():
    """When every GPU and model has the same true values, a fit without any one fold predicts it."""
    sens = _two_gpus_same_values()
    for kind in ("family", "gpu"):
        sc = cross_validate(sens, kind, _fit).score()
        assert sc["ttft_mape"] < 0.02 and sc["tpot_mape"] < 0.02, (kind, sc)


def test_a_gpu_unlike_the_others_shows_in_leave_one_gpu_out_only():
    """In sample every group is fitted well; holding out the odd GPU exposes that its values do
    not transfer (what a random split hides)."""
    truth = {}
    for m in ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-32B"):
        truth[f"h100_sxm/vllm/{m}"] = _rel(0.85, 1.1, 0.002, 0.02)
        truth[f"h200_sxm/vllm/{m}"] = _rel(0.85, 1.1, 0.002, 0.02)
        truth[f"mi300x/vllm/{m}"] = _rel(1.25, 1.35, 0.002, 0.02)
    sens = _synthetic(truth, n_per_group=8)
    inside = in_sample(sens, _fit).score()
    by_gpu = cross_validate(sens, "gpu", _fit).by_fold()
    assert inside["tpot_mape"] < 0.03
    assert by_gpu["mi300x"]["tpot_mape"] > 0.2
    assert by_gpu["mi300x"]["tpot_bias"] < -0.2  # predicted too fast, as values fitted elsewhere make it
    assert by_gpu["h100_sxm"]["tpot_mape"] < by_gpu["mi300x"]["tpot_mape"]


def test_format_lists_every_fold_and_the_total():
    res = cross_validate(_two_gpus_same_values(), "gpu", _fit)
    text = res.format()
    assert "h100_sxm" in text and "b200_sxm" in text and "all (point-weighted)" in text
    assert res.format(markdown=True).startswith("| held out |")


def test_reduced_slope_runs_use_their_own_reduced_base(monkeypatch):
    """measure_sensitivities(reduced=True): the base prediction at full counts, every knob's run
    and a reference base at the reduced counts, slopes against that reference."""
    from servesim.validate import sensitivity as sv
    from servesim.validate.points import Point

    calls = []

    def fake_simulate(config, analytic, frontend, num_prompts=None, warmup=None):
        calls.append(num_prompts)
        short = num_prompts is not None  # a shorter run reads 5% faster: the slopes must not see it
        k = 0.95 if short else 1.0
        return type("R", (), {"completed": 1, "ttft_ms": k * 10.0 / analytic["mem_eff"], "first_token_running": 3.0,
                              "tpot_ms": k * 1.0 / analytic["gemm_eff_max"]})()

    monkeypatch.setattr(sv, "simulate_point", fake_simulate)
    monkeypatch.setattr(sv, "check_point", lambda p: p)
    row = {"id": "r", "system": "h100_sxm", "backend": "vllm", "model": "m", "measured_mean_ttft_ms": "1",
           "measured_mean_tpot_ms": "1"}
    p = Point(row, {"workload": {"concurrency": 8, "num_prompts": 80, "warmup": 16}, "deployment": {"tp": 1}}, "ok")
    assert sv.reduced_counts(p) == (24, 8)
    [s] = sv.measure_sensitivities([p], DEFAULT_BASE, reduced=True)
    assert calls[0] is None and set(calls[1:]) == {24}  # full base first, then the reduced ones
    assert s.ttft_base == pytest.approx(10.0 / DEFAULT_BASE.mem_eff)  # the full-count base
    # TTFT ∝ 1/mem_eff: slope per unit of time scale = the (reduced) base TTFT
    assert s.ttft_slope["mem"] == pytest.approx(0.95 * 10.0 / DEFAULT_BASE.mem_eff, rel=1e-9)
    assert s.ttft_slope["sched"] == 0.0


def test_a_fold_predictor_sees_each_fold_once_under_the_fit_without_it():
    """``predict`` is called once per held-out fold, with that fold's points and the calibration
    fitted without them; a point it cannot price is left out of the scores and listed."""
    sens = _two_gpus_same_values()
    calls = []

    def predict(cal, points):
        calls.append((cal, [s.point.id for s in points]))
        return [None if i == 0 else (s.point.measured_ttft_ms, s.point.measured_tpot_ms)
                for i, s in enumerate(points)]

    res = cross_validate(sens, "gpu", _fit, predict=predict)
    assert sorted(ids for _, c in calls for ids in c) == sorted(s.point.id for s in sens)
    assert len(calls) == 2 and all(c is not None for c, _ in calls)
    assert res.unpriced == [c[0] for _, c in calls]
    assert len(res.rows) == len(sens) - 2
    assert res.score()["ttft_mape"] == 0.0 and res.score()["tpot_mape"] == 0.0
    inside = in_sample(sens, _fit, predict=predict)
    assert len(inside.unpriced) == 1 and len(inside.rows) == len(sens) - 1
