"""Calibration files: parse, resolve shared < */engine < gpu/* < gpu/engine, save, errors."""

from __future__ import annotations

import pytest
import yaml

from servesim.errors import ConfigError
from servesim.perf.analytic_params import AnalyticParams
from servesim.perf.calibration import DEFAULT_CALIBRATION, Calibration, load_calibration, parse_calibration
from servesim.perf.frontend import FrontendParams

DOC = {
    "shared": {"analytic": {"mem_eff": 0.7, "gemm_eff_max": 0.6}, "frontend": {"scheduler_pass_s": 0.05}},
    "groups": {
        "*/sglang": {"analytic": {"mem_eff": 0.65}},
        "h200_sxm/*": {"frontend": {"scheduler_pass_s": 0.04}},
        "h200_sxm/sglang": {"analytic": {"gemm_eff_max": 0.5}},
    },
}


def test_resolve_precedence():
    cal = parse_calibration(DOC)
    a, f = cal.resolve("h200_sxm", "sglang")
    assert a == {"mem_eff": 0.65, "gemm_eff_max": 0.5}
    assert f == {"scheduler_pass_s": 0.04}
    # a GPU without groups of its own takes its nearest same-vendor GPU's (h200_sxm/* here), but
    # not its scheduler CPU time (a measured deployment's alone: another node's host CPU)
    a, f = cal.resolve("b200_sxm", "vllm")
    assert a == {"mem_eff": 0.7, "gemm_eff_max": 0.6} and f == {}
    # another vendor's GPU never does: the shared analytic values alone
    a, f = cal.resolve("mi300x", "vllm")
    assert a == {"mem_eff": 0.7, "gemm_eff_max": 0.6} and f == {}
    # a file without groups is the user's own: its shared values apply everywhere
    assert parse_calibration({"shared": DOC["shared"]}).resolve("mi300x", "vllm")[1] == {"scheduler_pass_s": 0.05}


def test_model_groups_apply_on_top_of_gpu_engine():
    doc = {**DOC, "groups": {**DOC["groups"],
                             "h200_sxm/sglang/deepseek-ai/DeepSeek-R1": {"analytic": {"mem_eff": 0.5}},
                             "h200_sxm/sglang/deepseek-ai/DeepSeek-R1@fp4": {"frontend": {"scheduler_pass_s": 0.1}}}}
    cal = parse_calibration(doc)
    # nvfp4 and mxfp4 are written fp4 in group keys
    a, f = cal.resolve("h200_sxm", "sglang", "deepseek-ai/DeepSeek-R1", "nvfp4")
    assert a == {"mem_eff": 0.5, "gemm_eff_max": 0.5} and f == {"scheduler_pass_s": 0.1}
    assert cal.group_of("h200_sxm", "sglang", "deepseek-ai/DeepSeek-R1", "nvfp4") == \
        "h200_sxm/sglang/deepseek-ai/DeepSeek-R1@fp4"
    a, f = cal.resolve("h200_sxm", "sglang", "deepseek-ai/DeepSeek-R1", "fp8")
    assert a == {"mem_eff": 0.5, "gemm_eff_max": 0.5} and f == {"scheduler_pass_s": 0.04}
    # another model, or no model: the GPU/engine group's values; an unmeasured model not its
    # scheduler CPU time (fitted on other models: what a pass costs the host depends on the model)
    assert cal.resolve("h200_sxm", "sglang", "Qwen/Qwen3-32B", "fp8")[0] == cal.resolve("h200_sxm", "sglang")[0]
    assert cal.resolve("h200_sxm", "sglang", "Qwen/Qwen3-32B", "fp8")[1] == {}
    assert cal.resolve("h200_sxm", "sglang")[1] == {"scheduler_pass_s": 0.04}
    assert cal.group_of("b200_sxm", "vllm", "Qwen/Qwen3-32B") == "h200_sxm/*"
    assert cal.group_of("mi300x", "vllm", "Qwen/Qwen3-32B") == "shared"


def test_model_groups_are_found_by_architecture_and_exact_names_win():
    """A group keyed by an architecture (DeepSeek-V3) applies to its other checkpoints; a group
    under a checkpoint's own name applies on top of it."""
    doc = {**DOC, "groups": {**DOC["groups"],
                             "h200_sxm/sglang/deepseek-ai/DeepSeek-V3@fp8": {"analytic": {"mem_eff": 0.6},
                                                                            "frontend": {"scheduler_pass_s": 0.2}},
                             "h200_sxm/sglang/deepseek-ai/DeepSeek-R1-0528@fp8": {"analytic": {"mem_eff": 0.7}}}}
    cal = parse_calibration(doc)
    a, f = cal.resolve("h200_sxm", "sglang", "deepseek-ai/DeepSeek-R1", "fp8")
    assert a["mem_eff"] == 0.6 and f["scheduler_pass_s"] == 0.2
    assert cal.group_of("h200_sxm", "sglang", "deepseek-ai/DeepSeek-R1", "fp8") == \
        "h200_sxm/sglang/deepseek-ai/DeepSeek-V3@fp8"
    a, f = cal.resolve("h200_sxm", "sglang", "deepseek-ai/DeepSeek-R1-0528", "fp8")
    assert a["mem_eff"] == 0.7 and f["scheduler_pass_s"] == 0.2
    assert cal.group_of("h200_sxm", "sglang", "deepseek-ai/DeepSeek-R1-0528", "fp8") == \
        "h200_sxm/sglang/deepseek-ai/DeepSeek-R1-0528@fp8"
    # a short name finds the canonical id's group
    a, f = cal.resolve("h200_sxm", "sglang", "DeepSeek-R1-0528", "fp8")
    assert a["mem_eff"] == 0.7 and f["scheduler_pass_s"] == 0.2
    # another architecture, and a model given by a path, keep the GPU/engine group's values
    # (not its scheduler CPU time: they are not measured deployments)
    for other in ("Qwen/Qwen3-32B", "/models/my-model"):
        assert cal.resolve("h200_sxm", "sglang", other, "fp8") == (cal.resolve("h200_sxm", "sglang")[0], {})


def test_roundtrip(tmp_path):
    path = tmp_path / "c.yaml"
    parse_calibration(DOC).save(path)
    again = load_calibration(path)
    assert again.resolve("h200_sxm", "sglang") == parse_calibration(DOC).resolve("h200_sxm", "sglang")


def test_flat_legacy_file_is_shared_analytic():
    cal = parse_calibration({"params": {"mem_eff": 0.5}})
    assert cal.resolve("x", "y") == ({"mem_eff": 0.5}, {})


@pytest.mark.parametrize("doc, match", [
    ({"shared": {"analytic": {"no_such": 1}}}, "no_such"),
    ({"groups": {"h100": {}}}, "<gpu>/<engine>"),
    ({"shared": {"gpu": {}}}, "unknown key"),
])
def test_bad_files_name_the_problem(doc, match):
    with pytest.raises(ConfigError, match=match):
        parse_calibration(doc, "c.yaml")


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read.*bundled calibrations: default, fit-split"):
        load_calibration(tmp_path / "nope.yaml")


def test_bundled_calibrations_load_by_name():
    """``fit-split`` (fitted on the fit rows only, for the honest held-out figure) and ``default``."""
    split = load_calibration("fit-split")
    assert "fit split" in split.meta["fitted_on"]
    assert load_calibration("default").to_dict() == load_calibration(None).to_dict()


def test_bundled_default_is_valid():
    cal = load_calibration(None)
    assert isinstance(cal, Calibration)
    assert yaml.safe_load(DEFAULT_CALIBRATION.read_text())["shared"]
    for gpu, engine in [("h100_sxm", "sglang"), ("b200_sxm", "vllm"), ("mi355x", "trtllm")]:
        a, f = cal.resolve(gpu, engine)
        AnalyticParams.model_validate(a)
        FrontendParams.model_validate(f)


def test_config_names_a_bundled_calibration():
    from servesim.api import predict

    from importlib.resources import files

    cfg = yaml.safe_load((files("servesim") / "examples" / "default.yaml").read_text())
    cfg["workload"]["num_requests"] = 20
    cfg["perf"] = {"model": "analytic", "calibration": "fit-split"}
    cfg["output"] = {"dir": None}
    pred = predict(cfg)
    assert pred.deployment.describe()["perf"]["calibration"] == "fit-split.yaml"


def test_a_missing_path_is_not_read_as_a_bundled_name(tmp_path):
    """Only bare names resolve to bundled files: a path without its ``.yaml`` is an error,
    not a silent read of ``<path>.yaml``."""
    (tmp_path / "other.yaml").write_text("shared: {}\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load_calibration(str(tmp_path / "other"))


def test_client_fields_of_a_group_never_apply():
    """A calibration group sets the engine's frontend fields only: client-side ones in a group
    or in the shared section (older files) are ignored; the client profile sets them."""
    cal = parse_calibration({"shared": {"frontend": {"first_token_overhead_s": 0.05, "scheduler_pass_s": 1e-3}},
                             "groups": {"h200_sxm/sglang": {"frontend": {"first_token_overhead_s": 0.16,
                                                                         "stream_per_running_s": 5e-4,
                                                                         "scheduler_per_request_s": 2e-6}}}})
    _, f = cal.resolve("h200_sxm", "sglang")
    assert f == {"scheduler_pass_s": 1e-3, "scheduler_per_request_s": 2e-6}


@pytest.mark.parametrize("gpu,engine,source", [
    ("b300_sxm", "trtllm", "b200_sxm"), ("gb200", "vllm", "b200_sxm"), ("mi325x", "sglang", "mi300x"),
    ("h200_sxm", "sglang", "h200_sxm"), ("mi355x", "vllm", "mi355x"), ("l40s", "sglang", "h100_sxm")])
def test_gpu_without_groups_inherits_from_its_nearest_same_vendor_gpu(gpu, engine, source):
    cal = parse_calibration({"groups": {f"{g}/{e}": {"analytic": {"mem_eff": 0.5}} for g, e in (
        ("b200_sxm", "trtllm"), ("b200_sxm", "vllm"), ("h100_sxm", "sglang"), ("h100_sxm", "vllm"),
        ("h200_sxm", "sglang"), ("mi300x", "sglang"), ("mi355x", "sglang"))}})
    assert cal.gpu_source(gpu, engine) == source
    # an AMD part never falls back to an NVIDIA fit, nor the reverse
    from servesim.perf.calibration import gpu_distance

    assert gpu_distance("mi355x", "h200_sxm") == float("inf")
    assert gpu_distance("b300_sxm", "b200_sxm") < gpu_distance("b300_sxm", "h200_sxm")
