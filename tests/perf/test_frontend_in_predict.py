"""The frontend stage inside ``servesim predict`` (the path validate shares)."""

from __future__ import annotations

import pytest

from servesim.api import predict
from servesim.cluster.deployment import build_deployment
from servesim.config import load_config
from servesim.perf.analytic import AnalyticStepTime
from servesim.perf.frontend import FrontendParams, SchedulerOverheadStepTime


def _cfg(concurrency: int, perf: dict) -> dict:
    return {
        "seed": 0,
        "workload": {"kind": "closed_loop", "recipe": "fixed", "concurrency": concurrency, "isl": 1000,
                     "osl": 20, "num_prompts": 4 * concurrency, "warmup": 0},
        "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "engine": "sglang"},
        "perf": perf,
        "output": {"dir": None},
    }


def _ttft_ms(concurrency: int, perf: dict) -> float:
    return predict(_cfg(concurrency, perf)).summary["latency"]["ttft_ms"]["mean"]


def test_frontend_ttft_grows_with_concurrency_in_closed_loop():
    """A serial tokenizer: requests released together queue, so the frontend's share of TTFT grows."""
    fe = {"tokenize_per_token_s": 2e-5, "tokenize_base_s": 1e-3, "first_token_overhead_s": 0.01}
    engine_only = {"model": "fixed", "seconds": 0.02}
    with_fe = {"model": "fixed", "seconds": 0.02, "frontend": fe}
    added = {c: _ttft_ms(c, with_fe) - _ttft_ms(c, engine_only) for c in (1, 8, 32)}
    assert added[1] == pytest.approx(10 + 1 + 20, rel=0.05)  # stream latency + one tokenization (ms)
    assert added[1] < added[8] < added[32]
    assert added[32] > 5 * added[1]


def test_calibration_null_is_the_engine_only_view():
    dep = build_deployment(load_config(_cfg(4, {"calibration": None})))
    assert dep.make_frontend() is None and isinstance(dep.step_time, AnalyticStepTime)
    assert dep.frontend_params == FrontendParams.zero()
    assert dep.describe()["perf"]["calibration"] is None
    # the default calibration switches the frontend on and adds its stages to TTFT
    dflt = build_deployment(load_config(_cfg(4, {})))
    assert dflt.describe()["perf"]["calibration"] == "default.yaml"
    assert dflt.make_frontend() is not None
    assert _ttft_ms(4, {}) > _ttft_ms(4, {"calibration": None})


def test_scheduler_overhead_wraps_the_step_time_and_async_hides_it():
    dep = build_deployment(load_config(_cfg(4, {"calibration": None, "frontend": {"scheduler_pass_s": 1e-3}})))
    assert isinstance(dep.step_time, SchedulerOverheadStepTime)
    dep = build_deployment(load_config(_cfg(4, {"calibration": None, "frontend": {
        "scheduler_pass_s": 1e-3, "async_scheduling": True}})))
    assert isinstance(dep.step_time, AnalyticStepTime)


def test_bad_frontend_key_and_calibration_path(tmp_path):
    from servesim.errors import ConfigError

    with pytest.raises(ConfigError, match="perf.frontend"):
        build_deployment(load_config(_cfg(4, {"frontend": {"nope": 1}})))
    with pytest.raises(ConfigError, match="perf.calibration"):
        build_deployment(load_config(_cfg(4, {"calibration": str(tmp_path / "missing.yaml")})))


def test_a_model_group_of_the_calibration_applies_in_predict(tmp_path):
    """predict resolves the deployment's model@precision group on top of its GPU/engine group."""
    import yaml

    path = tmp_path / "cal.yaml"
    path.write_text(yaml.safe_dump({"shared": {"frontend": {"first_token_overhead_s": 0.01}}, "groups": {
        "h100_sxm/sglang": {"frontend": {"first_token_overhead_s": 0.02}},
        "h100_sxm/sglang/meta-llama/Llama-3.1-8B-Instruct@bf16": {"frontend": {"first_token_overhead_s": 0.5}},
        "h100_sxm/sglang/meta-llama/Llama-3.1-8B-Instruct@fp8": {"frontend": {"first_token_overhead_s": 9.0}},
    }}))
    perf = {"calibration": str(path)}
    pred = predict(_cfg(1, perf))
    resolved = pred.to_json()["deployment_resolved"]["perf"]
    assert resolved["calibration_group"] == "h100_sxm/sglang/meta-llama/Llama-3.1-8B-Instruct@bf16"
    assert resolved["frontend"]["first_token_overhead_s"] == 0.5
    fp8 = _cfg(1, perf)
    fp8["deployment"]["weight_dtype"] = "fp8"
    assert predict(fp8).to_json()["deployment_resolved"]["perf"]["frontend"]["first_token_overhead_s"] == 9.0
