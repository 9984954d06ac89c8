"""agentic_mooncake v2 rows read by the plain-row shortcut (``formats._plain_v2_row``) give the
graph, or the error, that reading them field by field gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servesim.errors import WorkloadError
from servesim.workload.agentic import formats

HEADER = {"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 4}
LONG = list(range(100))  # read as an array (rows.py)
ROOT = {"request_id": "a", "play_id": "p", "session_id": "s", "not_before_ms": 5, "input_length": 400,
        "output_length": 3, "hash_ids": LONG, "model": "m", "recorded_api_time_ms": 12.5}
DEP = {"request_id": "a", "trigger": "completion", "relation": "sequence", "delay_ms": 7}


def _child(**changes) -> dict:
    row = {"request_id": "b", "play_id": "p", "session_id": "s", "not_before_ms": 20.0, "input_length": 9,
           "output_length": 0, "hash_ids": [1, 2, 3], "dependencies": [dict(DEP)]}
    row.update(changes)
    return {k: v for k, v in row.items() if v is not _DROP}


_DROP = object()

CASES = [
    {}, {"model": 7}, {"model": " "}, {"model": None}, {"session_id": 3}, {"request_id": " "},
    {"input_length": 9.0}, {"input_length": _DROP, "input_tokens": 9}, {"input_length": 13}, {"input_length": 0},
    {"input_length": True}, {"output_length": _DROP, "output_tokens": 4}, {"output_length": -1},
    {"output_length": 2.0}, {"not_before_ms": 3}, {"not_before_ms": -1}, {"not_before_ms": True},
    {"not_before_ms": _DROP}, {"not_before_ms": None}, {"not_before_ms": 10**400}, {"recorded_api_time_ms": 4},
    {"recorded_api_time_ms": None}, {"recorded_api_time_ms": -2.5}, {"hash_ids": [1, -2, 3]},
    {"hash_ids": [1, 2.5, 3]}, {"hash_ids": _DROP}, {"hash_ids": "x"}, {"wait_for": ["a"]}, {"schema": "x"},
    {"dependencies": None}, {"dependencies": []}, {"dependencies": {"request_id": "a"}},
    {"dependencies": ["a"]}, {"dependencies": [dict(DEP, trigger=None, relation=None, delay_ms=None)]},
    {"dependencies": [dict(DEP, trigger="dispatch", relation="replay_barrier", delay_ms=0.5)]},
    {"dependencies": [dict(DEP, relation="spawn"), dict(DEP, relation="join", delay_ms=3)]},
    {"dependencies": [dict(DEP, relation="fork")]}, {"dependencies": [dict(DEP, trigger="first_token")]},
    {"dependencies": [dict(DEP, trigger=1)]}, {"dependencies": [dict(DEP, delay_ms=-1)]},
    {"dependencies": [dict(DEP, delay_ms=True)]}, {"dependencies": [dict(DEP, request_id=5)]},
    {"dependencies": [dict(DEP, request_id="zz")]}, {"dependencies": [dict(DEP, request_id=" ")]},
    {"play_id": "q"},
]


def _read(path: Path):
    try:
        return formats.read_agentic_mooncake(path, None)
    except WorkloadError as exc:
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("k", range(len(CASES)))
def test_plain_rows_read_as_field_by_field(tmp_path, monkeypatch, k):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(o) for o in (HEADER, ROOT, _child(**CASES[k]))) + "\n")
    shortcut = _read(path)
    with monkeypatch.context() as m:
        m.setattr(formats, "_plain_v2_row", lambda row, bs: None)
        fields = _read(path)
    assert shortcut == fields


def test_plain_rows_take_the_shortcut(tmp_path, monkeypatch):
    """The usual rows are plain: the shortcut reads them (else it would save nothing)."""
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(o) for o in (HEADER, ROOT, _child())) + "\n")
    taken = []
    plain = formats._plain_v2_row
    monkeypatch.setattr(formats, "_plain_v2_row", lambda row, bs: taken.append(plain(row, bs)) or taken[-1])
    formats.read_agentic_mooncake(path, None)
    assert len(taken) == 2 and all(t is not None for t in taken)


def test_a_floor_beyond_any_float_is_a_worded_error(tmp_path):
    """``not_before_ms: 10**400`` names the file, line and field (it raised a bare OverflowError)."""
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(o) for o in (HEADER, ROOT, _child(not_before_ms=10**400))) + "\n")
    with pytest.raises(WorkloadError, match=r"t\.jsonl:3: field .not_before_ms.: expected a finite number >= 0"):
        formats.read_agentic_mooncake(path, None)
