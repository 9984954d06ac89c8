"""The README's quickstart works on a fresh clone: its trace is committed and regenerates exactly."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import servesim
from servesim.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sample_trace_is_what_the_script_writes(tmp_path, monkeypatch):
    mod = _module("make_sample_trace")
    mod.main(["--out", str(tmp_path / "sample.jsonl")])
    assert (tmp_path / "sample.jsonl").read_bytes() == (EXAMPLES / "traces" / "sample_chat.jsonl").read_bytes()


def test_quickstart_config_runs_from_any_working_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # workload.path is relative to the config; output.dir to the working directory
    assert main(["predict", str(EXAMPLES / "quickstart.yaml"), "--format", "json", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    req = doc["summary"]["requests"]
    assert req["total"] == req["completed"] == 1220
    assert doc["summary"]["cache"]["prefix_reuse_ratio"] > 0.3  # later turns reuse earlier turns' blocks
    assert Path(doc["output_dir"]) == Path("out/quickstart") and (tmp_path / "out/quickstart/prediction.json").is_file()


def test_azure_csv_converts_to_a_trace_servesim_reads(tmp_path):
    csv_path = tmp_path / "azure.csv"
    csv_path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                        "2023-11-16 18:15:46.6805900,374,44\n"
                        "2023-11-16 18:15:50.9951690,396,0\n"
                        "2023-11-16 18:15:51.0000000,879,7\n")
    n, skipped = _module("azure_to_jsonl").convert(csv_path, tmp_path / "azure.jsonl")
    assert (n, skipped) == (2, 1)
    rows = [json.loads(line) for line in (tmp_path / "azure.jsonl").read_text().splitlines()]
    assert rows[1]["timestamp"] == 4319.41 and rows[1]["input_length"] == 879
    pred = servesim.predict({"workload": {"kind": "trace", "path": str(tmp_path / "azure.jsonl")},
                             "output": {"dir": None}})
    assert pred.summary["requests"]["completed"] == 2


def test_files_a_config_reads_are_found_beside_it(tmp_path, monkeypatch, capsys):
    """A model config.json, a GPU spec and a trace named by relative paths in a config are read
    from the config's folder, whatever the working directory; outputs land in the working one."""
    import shutil

    import servesim

    pkg = Path(servesim.__file__).parent
    here = tmp_path / "project"
    (here / "specs").mkdir(parents=True)
    shutil.copy(pkg / "models" / "bundled" / "meta-llama__Llama-3.1-8B-Instruct.json", here / "specs" / "config.json")
    shutil.copy(pkg / "hardware" / "gpus" / "h100_sxm.yaml", here / "specs" / "my_gpu.yaml")
    shutil.copy(EXAMPLES / "traces" / "sample_chat.jsonl", here / "trace.jsonl")
    (here / "run.yaml").write_text(
        "workload: {kind: trace, path: trace.jsonl, limit: 50}\n"
        "deployment: {model: specs/config.json, gpu: specs/my_gpu.yaml}\n"
        "output: {dir: out}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["predict", str(here / "run.yaml"), "--format", "json", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["requests"]["completed"] == 50
    assert (elsewhere / "out" / "prediction.json").is_file()
