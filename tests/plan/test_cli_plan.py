"""`servesim sweep`, `servesim recommend` and `servesim maxload` from the command line."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import yaml

from servesim.cli import main


def _config(tmp_path, base, sweep: dict | None = None):
    base["output"] = {"dir": None}
    if sweep is not None:
        base["sweep"] = sweep
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(base))
    return path


def test_sweep_then_recommend_from_its_folder(tmp_path, base, capsys):
    out = tmp_path / "sw"
    base["slo"] = {"ttft_ms": {"p90": 110}}  # p90 TTFT: ~136 ms with 2 workers, ~91 ms with 3
    cfg = _config(tmp_path, base, {"parameters": {"deployment.workers": [2, 3, 4]}, "executor": {"jobs": 1}})
    assert main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "3 candidates: 3 ran" in text and "Chosen (candidate 1)" in text  # 2 workers miss the 110 ms TTFT p90
    assert pq.read_table(out / "candidates.parquet").num_rows == 3
    # rerunning resumes: nothing left to simulate
    assert main(["sweep", str(cfg), "--out", str(out), "--quiet"]) == 0
    assert "(0 simulated now" in capsys.readouterr().out
    rec = tmp_path / "rec"
    assert main(["recommend", str(cfg), "--from", str(out), "--out", str(rec), "--by", "gpus"]) == 0
    doc = json.loads((rec / "recommendation.json").read_text())
    assert doc["chosen"]["params"] == {"deployment.workers": 3}
    assert doc["chosen"]["config"]["deployment"]["workers"] == 3
    assert (rec / "launch" / "vllm.sh").exists() and (rec / "launch" / "sglang.sh").exists()


def test_spec_file_and_errors(tmp_path, base, capsys):
    cfg = _config(tmp_path, base)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"sweep": {"parameters": {"deployment.workers": {"low": 1, "high": 5}}}}))
    assert main(["sweep", str(cfg), "--spec", str(spec)]) == 2  # grid search needs a step
    assert "grid search needs" in capsys.readouterr().err
    assert main(["sweep", str(cfg)]) == 2
    assert "no `sweep` section" in capsys.readouterr().err
    del base["slo"]
    cfg = _config(tmp_path, base, {"parameters": {"deployment.workers": [1]}})
    assert main(["sweep", str(cfg)]) == 2
    assert "no `slo` section" in capsys.readouterr().err


def test_maxload_json(tmp_path, base, capsys):
    base["workload"]["num_requests"] = 120
    cfg = _config(tmp_path, base)
    assert main(["maxload", str(cfg), "--format", "json", "--tol", "0.05", "--set", "deployment.workers=2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["knob"] == "workload.arrival.rate" and doc["max_load"] < doc["first_failing"]
