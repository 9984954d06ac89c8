"""The workload's shared block ids (workload/sharing.py), from requests or a trace's lines."""

from __future__ import annotations

import json
from pathlib import Path

from servesim.config import load_config
from servesim.workload.request import OUTPUT_ID_BASE, Request, output_block_id
from servesim.workload.sharing import shared_block_ids
from servesim.workload.source import WorkloadSource, build_source
from servesim.workload.trace import listed_block_ids


def source_of(reqs: list[Request]) -> WorkloadSource:
    return WorkloadSource(mode="open", concurrency=None, description="test", _factory=lambda: iter(reqs))


def req(i: int, ids: tuple, out_ids: tuple = ()) -> Request:
    return Request(index=i, request_id=str(i), arrival=0.0, input_length=len(ids), output_length=1, hash_ids=ids,
                   block_size=1, output_hash_ids=out_ids)


def test_ids_listed_by_more_than_one_request() -> None:
    reqs = [req(0, (1, 2, 3)), req(1, (1, 4, 4), out_ids=(3,))]
    assert shared_block_ids(source_of(reqs)) == {1, 3, 4}  # 4: listed twice by one request


def test_listed_ids_in_the_generated_range_are_shared_and_marked() -> None:
    gen = output_block_id(0, 2)
    reqs = [req(0, (1, 2)), req(1, (1,)), req(2, (gen,))]
    assert shared_block_ids(source_of(reqs)) == {1, gen, OUTPUT_ID_BASE}


def test_ids_beyond_64_bits_are_counted_too() -> None:
    reqs = [req(0, (1, 2**70)), req(1, (2**70,)), req(2, (1,))]
    assert shared_block_ids(source_of(reqs)) == {1, 2**70}


def _trace(tmp_path: Path, rows: list) -> WorkloadSource:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    cfg = load_config({"workload": {"kind": "trace", "path": str(path), "block_size": 4, "end_ms": 50},
                       "deployment": {"model": "Qwen/Qwen3-8B", "gpu": "h100_sxm"}})
    return build_source(cfg.workload, 0)


def test_a_trace_is_scanned_for_its_ids_alone(tmp_path) -> None:
    """The scan of a trace's lines gives what its requests list (sessions, prompts without ids),
    plus the lines a window skips."""
    rows = [{"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": [1, 2], "session_id": "s"},
            {"timestamp": 0, "input_length": 12, "output_length": 2, "hash_ids": [1, 2, 3], "session_id": "s",
             "delay": 5},
            {"timestamp": 10, "input_length": 6, "output_length": 2},  # ids of its own
            {"timestamp": 20, "input_length": 4, "output_length": 2, "hash_ids": [7]},
            {"timestamp": 99, "input_length": 4, "output_length": 2, "hash_ids": [7]}]  # past end_ms
    source = _trace(tmp_path, rows)
    assert list(listed_block_ids(tmp_path / "t.jsonl")) == [1, 2, 1, 2, 3, 7, 7]
    from_requests = [bid for r in source.requests() for bid in r.hash_ids if bid >= 0]
    assert from_requests == [1, 2, 1, 2, 3, 7]
    assert shared_block_ids(source) == {1, 2, 7}  # 7: also listed by the skipped line


def test_a_line_the_typed_decoder_refuses_falls_back_to_the_requests(tmp_path) -> None:
    """An integral float id is accepted by the reader's Python checks, not by the scan."""
    rows = [{"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": [1.0, 2]},
            {"timestamp": 1, "input_length": 4, "output_length": 2, "hash_ids": [1]}]
    source = _trace(tmp_path, rows)
    assert listed_block_ids(tmp_path / "t.jsonl") is None
    assert shared_block_ids(source) == {1}
