"""The output folder as a set (report/files.py:OutputSet): replaced whole when it holds only
servesim's files, merged file by file (prediction.json last) when it holds others."""

from __future__ import annotations

import json
import os
import stat

import pytest

from servesim.api import predict
from servesim.report.files import OutputSet

TINY = {"seed": 1, "workload": {"kind": "synthetic", "num_requests": 10, "arrival": {"rate": 5.0},
                                "input": {"dist": "fixed", "value": 100}, "output": {"dist": "fixed", "value": 4}},
        "output": {"timeseries": False}}


@pytest.fixture(scope="module")
def pred():
    return predict(TINY)


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_new_folder_and_permissions(tmp_path, pred):
    out = pred.write(tmp_path / "a" / "b")
    assert _names(out) == ["prediction.json", "requests.parquet"]
    assert json.loads((out / "prediction.json").read_text())["complete"] is True
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~mask  # not mkdtemp's private 0700
    assert _names(tmp_path) == ["a"] and _names(tmp_path / "a") == ["b"]


def test_a_folder_of_outputs_is_replaced_whole(tmp_path, pred):
    out = tmp_path / "o"
    out.mkdir()
    (out / "prediction.json").write_text("{}")
    (out / "kv_events.jsonl").write_text("old\n")  # not written by this run: goes with the old set
    pred.write(out)
    assert _names(out) == ["prediction.json", "requests.parquet"]
    assert _names(tmp_path) == ["o"]


def test_a_folder_with_other_files_keeps_them(tmp_path, pred):
    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "kv_events.jsonl").write_text("old\n")
    (out / "prediction.json").write_text("{}")
    pred.write(out)
    assert _names(out) == ["notes.txt", "prediction.json", "requests.parquet"]
    assert (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "prediction.json").read_text())["complete"] is True
    assert _names(tmp_path) == ["o"]


def test_an_error_inside_the_set_leaves_the_folder(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "prediction.json").write_text("{}")
    with pytest.raises(RuntimeError):
        with OutputSet(out) as outputs:
            (outputs.path / "prediction.json").write_text('{"complete": true}')
            raise RuntimeError("half way")
    assert (out / "prediction.json").read_text() == "{}" and _names(tmp_path) == ["o"]
