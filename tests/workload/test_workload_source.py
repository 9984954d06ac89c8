"""build_source: dispatch, path resolution, replayability."""

from __future__ import annotations

import json

import pytest

from servesim.errors import WorkloadError
from servesim.workload import WorkloadSource, build_source, parse_workload


def test_trace_source_resolves_relative_path(tmp_path):
    (tmp_path / "t.jsonl").write_text(
        json.dumps({"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [3]}) + "\n"
    )
    cfg = parse_workload({"kind": "trace", "path": "t.jsonl", "speedup": 2, "limit": 5})
    src = build_source(cfg, seed=0, base_dir=tmp_path)
    assert isinstance(src, WorkloadSource)
    assert src.mode == "open" and src.concurrency is None
    assert "t.jsonl" in src.description and "speedup 2" in src.description
    assert len(list(src.requests())) == 1
    assert len(list(src.requests())) == 1  # replayable


def test_trace_source_missing_file_fails_early(tmp_path):
    cfg = parse_workload({"kind": "trace", "path": "missing.jsonl"})
    with pytest.raises(WorkloadError, match="missing.jsonl"):
        build_source(cfg, seed=0, base_dir=tmp_path)


def test_synthetic_and_closed_sources():
    syn = parse_workload({
        "kind": "synthetic", "num_requests": 3, "arrival": {"process": "gamma", "rate": 1, "burstiness": 2},
        "input": {"dist": "fixed", "value": 5}, "output": {"dist": "fixed", "value": 5},
    })
    src = build_source(syn, seed=1)
    assert src.mode == "open" and src.num_requests == 3 and "burstiness 2" in src.description
    assert list(src.requests()) == list(src.requests())
    closed = parse_workload({"kind": "closed_loop", "recipe": "fixed", "concurrency": 2, "isl": 5, "osl": 5})
    src = build_source(closed, seed=1)
    assert src.mode == "closed" and src.concurrency == 2 and src.num_requests == 20
