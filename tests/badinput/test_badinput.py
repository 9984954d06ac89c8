"""The bad-input corpus (cases.yaml) through `servesim predict`: each case gets its exit
status and message, never a traceback, and leaves an earlier run's outputs untouched."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path

import pytest
import yaml

from servesim.cli import main

HERE = Path(__file__).parent
CASES = yaml.safe_load((HERE / "cases.yaml").read_text())

_LENGTH = {"dist": "fixed", "value": 50}
BASES = {
    "synthetic": {
        "seed": 0,
        "workload": {"kind": "synthetic", "num_requests": 12, "arrival": {"process": "poisson", "rate": 5.0},
                     "input": {"dist": "uniform", "low": 50, "high": 400}, "output": dict(_LENGTH)},
        "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm"},
    },
    "trace": {
        "seed": 0,
        "workload": {"kind": "trace", "path": "trace.jsonl"},
        "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm"},
    },
    "closed_loop": {
        "seed": 0,
        "workload": {"kind": "closed_loop", "recipe": "inferencex_random", "concurrency": 2, "num_prompts": 4,
                     "isl": 200, "osl": 20},
        "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm"},
    },
}
GOOD_TRACE = '{"timestamp": 0, "input_length": 100, "output_length": 10}\n'


def merge(base: dict, patch: dict) -> dict:
    """``patch`` deep-merged into a copy of ``base``; a None value deletes the key."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict) and not {"name", "dist"} & set(value):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def all_cases():
    for group, cases in CASES.items():
        for case in cases:
            yield pytest.param(group, case, id=f"{group}: {case['name']}")


def build(tmp_path: Path, group: str, case: dict) -> list[str]:
    """Write the case's files; returns the `servesim predict` arguments."""
    if "trace_b64" in case:
        (tmp_path / case.get("trace_name", "trace.jsonl")).write_bytes(base64.b64decode(case["trace_b64"]))
    else:
        (tmp_path / case.get("trace_name", "trace.jsonl")).write_text(case.get("trace", GOOD_TRACE))
    if "yaml" in case:
        (tmp_path / "config.yaml").write_text(case["yaml"])
    else:
        cfg = merge(BASES.get(group, BASES["synthetic"]), case.get("config", {}))
        if "trace_name" in case:
            cfg["workload"]["path"] = case["trace_name"]
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    if "args_only" in case:
        return ["predict", *case["args_only"]]
    argv = ["predict", "config.yaml", "--out", "out", "--format", "json"]
    for s in case.get("set", []):
        argv += ["--set", s]
    return argv + case.get("args", [])


@pytest.mark.parametrize("group,case", list(all_cases()))
def test_bad_input(tmp_path, monkeypatch, capsys, group, case):
    monkeypatch.chdir(tmp_path)
    argv = build(tmp_path, group, case)
    previous = tmp_path / "out"
    previous.mkdir()
    (previous / "prediction.json").write_text('{"complete": true, "previous": 1}\n')
    rc = main(argv)
    captured = capsys.readouterr()
    assert rc == case["exit"], captured.err
    assert "Traceback" not in captured.err
    if rc != 0:
        message = captured.err
        assert message.startswith("servesim: error: "), message
        # nothing written, nothing removed: the previous outputs stand, no temporary folder is left
        assert (previous / "prediction.json").read_text() == '{"complete": true, "previous": 1}\n'
        assert sorted(p.name for p in previous.iterdir()) == ["prediction.json"]
    else:
        doc = json.loads((previous / "prediction.json").read_text())
        assert doc["complete"] is True
        message = "\n".join(doc["summary"]["warnings"])
        assert doc["summary"]["requests"]["total"] > 0
    assert [p.name for p in tmp_path.iterdir() if ".servesim-" in p.name] == []
    if "message" in case:
        assert case["message"] in message
    for fragment in case.get("absent", []):
        assert fragment not in message
