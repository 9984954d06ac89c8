"""Client profiles (servesim.perf.clients): chosen in the config, never from a calibration group."""

from __future__ import annotations

import pytest
import yaml

from servesim.api import predict
from servesim.cluster.deployment import build_deployment
from servesim.config import load_config
from servesim.errors import ConfigError
from servesim.perf.clients import BUILTIN_PROFILES, CLIENT_FIELDS, client_for_source, resolve_client


def _cfg(**top) -> dict:
    return {"seed": 0, "workload": {"kind": "closed_loop", "recipe": "fixed", "concurrency": 2, "isl": 500,
                                    "osl": 8, "num_prompts": 4, "warmup": 0},
            "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "engine": "vllm"},
            "output": {"dir": None}, **top}


def _frontend(cfg: dict) -> dict:
    return build_deployment(load_config(cfg)).describe()["perf"]["frontend"]


def test_default_is_the_engine_alone_and_named_profiles_set_the_client_fields():
    fe = _frontend(_cfg())
    assert all(fe[k] == 0.0 for k in CLIENT_FIELDS)
    for name in ("api-server", "vllm-bench", "aiperf", "inference-perf", "inferencex", "nvidia"):
        dep = build_deployment(load_config(_cfg(client=name)))
        got = dep.describe()["perf"]
        assert got["client"] == name
        assert {k: got["frontend"][k] for k in CLIENT_FIELDS} == pytest.approx(
            resolve_client(name, None).frontend() if name not in ("inferencex", "nvidia") else
            {k: got["frontend"][k] for k in CLIENT_FIELDS})
        assert got["frontend"]["first_token_overhead_s"] > 0


def test_switching_gpu_or_engine_never_changes_the_client(tmp_path):
    """Even a calibration whose groups carry client-side values (an older file) cannot move them."""
    path = tmp_path / "cal.yaml"
    path.write_text(yaml.safe_dump({
        "shared": {"frontend": {"first_token_overhead_s": 0.03}},
        "groups": {"h100_sxm/sglang": {"frontend": {"first_token_overhead_s": 0.029, "scheduler_pass_s": 1e-3}},
                   "h200_sxm/sglang": {"frontend": {"first_token_overhead_s": 0.162, "stream_per_running_s": 5e-4,
                                                    "scheduler_pass_s": 2e-3}}},
        "clients": {"inferencex": {"frontend": {"first_token_overhead_s": 0.021, "stream_per_running_s": 1e-4}}}}))
    seen = {}
    for gpu in ("h100_sxm", "h200_sxm", "b200_sxm"):
        for engine in ("sglang", "vllm"):
            cfg = _cfg(client="inferencex", perf={"calibration": str(path)})
            cfg["deployment"] = dict(cfg["deployment"], gpu=gpu, engine=engine)
            fe = _frontend(cfg)
            seen[gpu, engine] = tuple(fe[k] for k in CLIENT_FIELDS)
            assert fe["first_token_overhead_s"] == 0.021 and fe["stream_per_running_s"] == 1e-4
    assert len(set(seen.values())) == 1
    # the engine's own CPU time follows its group where the file measured the deployment (its
    # model's group on that GPU), and only there
    cfg = _cfg(client="inferencex", perf={"calibration": str(path)})
    cfg["deployment"] = dict(cfg["deployment"], gpu="h200_sxm", engine="sglang")
    assert _frontend(cfg)["scheduler_pass_s"] == 0.0
    doc = yaml.safe_load(path.read_text())
    doc["groups"]["h200_sxm/sglang/meta-llama/Llama-3.1-8B-Instruct@bf16"] = {"analytic": {"mem_eff": 0.8}}
    path.write_text(yaml.safe_dump(doc))
    assert _frontend(cfg)["scheduler_pass_s"] == 2e-3


def test_predict_reports_its_client_and_a_client_adds_to_ttft_only():
    none = predict(_cfg())
    bench = predict(_cfg(client="vllm-bench"))
    for pred, name in ((none, "none"), (bench, "vllm-bench")):
        assert pred.to_json()["deployment_resolved"]["perf"]["client"] == name
        assert pred.header()["client"] == name
    lat_none, lat_bench = none.summary["latency"], bench.summary["latency"]
    assert lat_bench["ttft_ms"]["mean"] > lat_none["ttft_ms"]["mean"]
    # (the tokenizer's queue staggers the two requests, which can change a pass's batch a little)
    assert lat_bench["tpot_ms"]["mean"] == pytest.approx(lat_none["tpot_ms"]["mean"], rel=0.1)


def test_unknown_profile_is_a_clear_error():
    with pytest.raises(ConfigError, match="client: unknown profile 'wrk'.*vllm-bench"):
        build_deployment(load_config(_cfg(client="wrk")))


def test_validate_picks_each_rows_client_from_its_source():
    assert client_for_source("aic_silicon_sample/inferencex") == "inferencex"
    assert client_for_source("inferencex_fixture") == "inferencex"
    assert client_for_source("aic_silicon_sample/nvidia") == "nvidia"
    assert client_for_source("somewhere/else") == "api-server"
    from servesim.perf.calibration import Calibration
    from servesim.validate.points import Point

    cal = Calibration(clients={"nvidia": {"frontend": {"first_token_overhead_s": 0.011}}})
    row = {"id": "x", "system": "h100_sxm", "backend": "vllm", "model": "m", "source": "aic_silicon_sample/nvidia"}
    _, fe = Point(row, {}, "ok").calibration_values(cal)
    assert fe["first_token_overhead_s"] == 0.011
    row["source"] = "aic_silicon_sample/inferencex"
    _, fe = Point(row, {}, "ok").calibration_values(cal)
    assert fe["first_token_overhead_s"] == BUILTIN_PROFILES["inferencex"].values["first_token_overhead_s"]


def test_every_profile_is_documented():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text()
    for name, prof in BUILTIN_PROFILES.items():
        assert prof.description and prof.origin in ("fitted", "source")
        assert f"`{name}`" in doc, name


def test_builtin_fitted_profiles_are_the_shipped_fit():
    """The built-in values of the fitted profiles (what a run without a calibration file's
    ``clients:`` section uses: ``perf.calibration: null``, ``validate`` on the bare physics) are
    the shipped ``default`` calibration's fit, so the two cannot drift apart."""
    from servesim.perf.calibration import load_calibration

    shipped = load_calibration("default").clients
    for name, prof in BUILTIN_PROFILES.items():
        if prof.origin != "fitted":
            continue
        for key, value in shipped[name]["frontend"].items():
            assert prof.values[key] == pytest.approx(value, rel=1e-6), (name, key)
