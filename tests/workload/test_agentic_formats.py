"""Agentic trace readers: what each format lowers to, and the errors that name file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servesim.errors import WorkloadError
from servesim.workload.agentic.formats import READERS

FIX = Path(__file__).parent / "agentic_fixtures"


def write(tmp_path: Path, *rows: str, name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(rows) + "\n")
    return p


def test_dag_lowering_resolves_a_delta_prompt_onto_the_base_and_its_answer():
    g = READERS["servesim_dag"](FIX / "fanout.dag.jsonl", None)
    assert g.block_size == 16 and len(g.plays) == 1
    nodes = {n.node_id: n for n in g.nodes}
    a, c = nodes["a"], nodes["c"]
    assert c.input_length == 100 + 2 + 30
    # a's prompt ends mid-block (100 = 6 x 16 + 4): c keeps a's six full blocks, then blocks of its own
    assert c.hash_ids[:6] == a.hash_ids[:6] and len(c.hash_ids) == 9
    assert not set(c.hash_ids[6:]) & set(a.hash_ids)
    assert [d.relation for d in c.deps] == ["join", "join"] and c.turn == 1
    assert nodes["b1"].hash_ids[:2] == a.hash_ids[:2]  # global ids: the shared system prompt
    assert nodes["d"].not_before == pytest.approx(2.0)  # floors are offsets from the play start


def test_delta_on_an_aligned_answer_gives_the_base_output_ids(tmp_path):
    path = write(tmp_path,
                 '{"id": "a", "input_length": 32, "output_length": 32, "hash_ids": [1, 2]}',
                 '{"id": "b", "extends": "a", "input_length": 16, "output_length": 1, "hash_ids": [9], '
                 '"deps": [{"id": "a"}]}')
    g = READERS["servesim_dag"](path, 16)
    a, b = g.nodes
    assert len(a.output_hash_ids) == 2  # the answer's two full blocks, carried by b
    assert b.hash_ids == a.hash_ids + a.output_hash_ids + b.hash_ids[4:] and len(b.hash_ids) == 5


def test_local_ids_are_scoped_to_their_play(tmp_path):
    path = write(tmp_path,
                 '{"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 16, "hash_id_scope": "local"}',
                 '{"request_id": "a", "play_id": "p", "session_id": "s", "not_before_ms": 0, '
                 '"input_length": 16, "output_length": 1, "hash_ids": [5]}',
                 '{"request_id": "b", "play_id": "q", "session_id": "s", "not_before_ms": 0, '
                 '"input_length": 16, "output_length": 1, "hash_ids": [5]}')
    g = READERS["agentic_mooncake"](path, None)
    assert g.nodes[0].hash_ids != g.nodes[1].hash_ids


def test_mooncake_delta_sessions_grow_by_answer_and_delta(tmp_path):
    path = write(tmp_path,
                 '{"session_id": "s", "timestamp": 0, "input_length": 1024, "output_length": 512, "hash_ids": [1, 2]}',
                 '{"session_id": "s", "delay": 2000, "input_length": 512, "output_length": 10, "hash_ids": [3]}')
    g = READERS["mooncake-delta"](path, None)
    first, second = g.nodes
    assert second.input_length == 1024 + 512 + 512
    assert second.hash_ids[:2] == first.hash_ids and second.hash_ids[2] == first.output_hash_ids[0]
    assert second.deps[0].delay == pytest.approx(2.0) and second.deps[0].kind == "think"


@pytest.mark.parametrize("rows,fmt,match", [
    (['{"id": "a", "input_length": 16, "output_length": 1, "deps": [{"id": "b"}]}',
      '{"id": "b", "input_length": 16, "output_length": 1, "deps": [{"id": "a"}]}'],
     "servesim_dag", r"t\.jsonl:2: dependency cycle 'b' -> 'a' -> 'b'"),
    (['{"id": "a", "input_length": 16, "output_length": 1}',
      '{"id": "b", "input_length": 16, "output_length": 1, "deps": [{"id": "zz"}]}'],
     "servesim_dag", r"t\.jsonl:2: field 'deps\[0\]\.id': unknown request id 'zz'"),
    (['{"id": "a", "input_length": 16, "output_length": 1}',
      '{"id": "b", "extends": "nope", "input_length": 16, "output_length": 1}'],
     "servesim_dag", r"t\.jsonl:2: the prompt extends request 'nope', which is not in the trace"),
    (['{"id": "a", "input_length": 16, "output_length": 1}',
      '{"id": "a", "input_length": 16, "output_length": 1}'],
     "servesim_dag", r"t\.jsonl:2: id 'a' repeats the node of .*t\.jsonl:1"),
    (['{"format": "servesim.dag", "version": 1, "block_size": 64}',
      '{"id": "a", "input_length": 16, "output_length": 1, "wait_for": []}'],
     "servesim_dag", r"t\.jsonl:2: field 'wait_for': this key belongs to the agentic_mooncake format"),
    (['{"format": "other.dag", "version": 1, "block_size": 64}'],
     "servesim_dag", r"t\.jsonl:1: field 'format': expected 'servesim.dag'"),
    (['{"schema": "dynamo.agentic_mooncake", "version": 3, "block_size": 64}'],
     "agentic_mooncake", r"t\.jsonl:1: field 'version': expected 2, got 3"),
    (['{"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 64}',
      '{"request_id": "a", "play_id": "p", "session_id": "s", "not_before_ms": 0, "input_length": 16, '
      '"output_length": 1, "hash_ids": [1], "wait_for": []}'],
     "agentic_mooncake", r"t\.jsonl:2: field 'wait_for': this key belongs to the agentic_mooncake v1 format"),
    (['{"request_id": "a", "input_length": 16, "output_length": 1, "hash_ids": [1]}',
      '{"request_id": "b", "play_id": "p", "input_length": 16, "output_length": 1, "hash_ids": [1]}'],
     "agentic_mooncake", r"t\.jsonl:2: field 'play_id': this key belongs to the agentic_mooncake v2 format"),
    (['{"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 16}',
      '{"request_id": "a", "play_id": "p", "session_id": "s", "not_before_ms": 0, "input_length": 16, '
      '"output_length": 1, "hash_ids": [1], "dependencies": [{"request_id": "a", "trigger": "soon"}]}'],
     "agentic_mooncake", r"t\.jsonl:2: field 'dependencies\[0\]\.trigger': expected one of 'dispatch', 'completion'"),
    (['{"request_id": "a", "input_length": 1000, "output_length": 1, "hash_ids": [1]}'],
     "agentic_mooncake", r"t\.jsonl:1: field 'hash_ids': expected at least 2 ids for input_length 1000 at block size 512"),
    (['{"request_id": "a", "input_length": 16, "output_length": 1, "hash_ids": [1], "wait_for": ["b"]}',
      '{"request_id": "b", "input_length": 16, "output_length": 1, "hash_ids": [1], "wait_for": ["a"]}'],
     "agentic_mooncake", r"dependency cycle"),
    (['{"id": "a", "input_length": 16, "output_length": 1}', '{"id": "b", "input_length": 16, "output_length": -1}'],
     "servesim_dag", r"t\.jsonl:2: field 'output_length': expected an integer in \[0, "),
    (['{"id": "a", "input_length": 16, "output_length": 1', ],
     "servesim_dag", r"t\.jsonl:1: invalid JSON"),
])
def test_bad_traces_are_errors_naming_file_line_and_field(tmp_path, rows, fmt, match):
    with pytest.raises(WorkloadError, match=match):
        READERS[fmt](write(tmp_path, *rows), None)


def test_header_block_size_must_agree_with_the_config(tmp_path):
    path = write(tmp_path, '{"format": "servesim.dag", "version": 1, "block_size": 64}',
                 '{"id": "a", "input_length": 16, "output_length": 1}')
    with pytest.raises(WorkloadError, match=r"t\.jsonl:1: field 'block_size': expected the config's .* \(32\)"):
        READERS["servesim_dag"](path, 32)
    assert READERS["servesim_dag"](path, 64).block_size == 64


def test_cross_play_dependency_is_an_error(tmp_path):
    path = write(tmp_path, '{"id": "a", "play": "p", "input_length": 16, "output_length": 1}',
                 '{"id": "b", "play": "q", "input_length": 16, "output_length": 1, "deps": [{"id": "a"}]}')
    with pytest.raises(WorkloadError, match=r"t\.jsonl:2: field 'deps\[0\]\.id': .*another play"):
        READERS["servesim_dag"](path, None)


def test_missing_file_is_an_error(tmp_path):
    with pytest.raises(WorkloadError, match="trace file not found"):
        READERS["servesim_dag"](tmp_path / "nope.jsonl", None)


def test_v2_export_reads_back_as_the_same_graph(tmp_path):
    from servesim.config import load_config
    from servesim.workload.agentic.export import write_agentic_mooncake_v2
    from servesim.workload.agentic.generator import generate_agentic
    from servesim.workload.agentic.load import play_starts
    from tests.workload.test_agentic_generator import BASE

    cfg = load_config(BASE).workload
    g = generate_agentic(cfg, 1)
    starts = play_starts(g, cfg.agentic.model_copy(update={"arrival": "constant", "rate": 2.0, "lanes": None}), 1.0, 1)
    path = tmp_path / "plays.jsonl.gz"
    assert write_agentic_mooncake_v2(g, starts, path) == len(g.nodes)
    back = READERS["agentic_mooncake"](path, None)
    assert sorted(n.node_id for n in back.nodes) == sorted(n.node_id for n in g.nodes)
    other = {n.node_id: n for n in back.nodes}
    for a in g.nodes:
        b = other[a.node_id]
        assert (a.input_length, max(a.output_length, 1), a.session) == (b.input_length, b.output_length, b.session)
        assert [(g.nodes[d.source].node_id, d.on, d.relation) for d in a.deps] == \
            [(back.nodes[d.source].node_id, d.on, d.relation) for d in b.deps]
        assert [d.delay for d in a.deps] == pytest.approx([d.delay for d in b.deps])
        # prefix structure kept within a play (ids are play-scoped in v2 "local")
    by = {n.node_id: n for n in back.nodes}
    assert by["play0/main/1"].hash_ids[:32] == by["play0/main/0"].hash_ids[:32]
    assert [p.start for p in back.plays] == pytest.approx([s.time for s in starts])


@pytest.mark.parametrize("rows,match", [
    (['{"session_id": "a", "turns": [{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, '
      '"spawns": ["nope"]}]}'], r"t\.jsonl:1: field 'turns\[0\]\.spawns\[0\]': branch target 'nope'"),
    (['{"session_id": "a", "turns": [{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1}]}',
      '{"session_id": "a", "turns": [{"messages": [{"role": "user", "content": "y"}], "max_tokens": 1}]}'],
     r"t\.jsonl:2: field 'session_id': duplicate session_id 'a' \(first on line 1\)"),
    (['{"session_id": "a", "turns": [{"messages": [{"role": "user", "content": "x"}]}]}'],
     r"t\.jsonl:1: field 'turns\[0\]\.max_tokens': expected an integer"),
    (['{"session_id": "a", "turns": []}'], r"t\.jsonl:1: field 'turns': expected a non-empty list"),
])
def test_aiperf_dag_errors(tmp_path, rows, match):
    with pytest.raises(WorkloadError, match=match):
        READERS["dag_jsonl"](write(tmp_path, *rows), None)


def _dyn(rid="a", session="s", parent=None, start=0, total=10, out=1, inp=16, ids=(1,), bs=16, **top) -> str:
    ctx = {"session_id": session}
    if parent is not None:
        ctx["parent_session_id"] = parent
    row = {"schema": "dynamo.request.trace.v1", "event_type": "request_end", "agent_context": ctx,
           "request": {"request_id": rid, "request_received_ms": start, "total_time_ms": total, "output_tokens": out,
                       "replay": {"trace_block_size": bs, "input_length": inp, "input_sequence_hashes": list(ids)}}}
    row.update(top)
    return json.dumps({k: v for k, v in row.items() if v is not None})


def test_dynamo_lowering_chains_sessions_spawns_and_joins_children():
    g = READERS["dynamo"](FIX / "dynamo.jsonl", None)
    by = {n.node_id: n for n in g.nodes}
    name = {i: n.node_id for i, n in enumerate(g.nodes)}
    deps = {n.node_id: [(name[d.source], d.relation, round(d.delay, 9)) for d in n.deps] for n in g.nodes}
    assert deps == {"m0": [], "c0": [("m0", "spawn", 0.2)], "m1": [("m0", "sequence", 0.69), ("c0", "join", 0.69)],
                    "c1": [("m1", "spawn", 0.0)], "o0": []}
    assert all(d.on == "completion" for n in g.nodes for d in n.deps)
    assert [p.play_id for p in g.plays] == ["main", "other"]
    assert by["c0"].agent == "subagent" and by["m1"].agent == "main" and by["c0"].session == "sub"
    assert by["m1"].input_length == 48 and by["c0"].output_length == 3


@pytest.mark.parametrize("rows,match", [
    ([_dyn(schema="dynamo.request.trace.v2")], r"t\.jsonl:1: field 'schema': expected 'dynamo\.request\.trace\.v1'"),
    ([_dyn(), _dyn(rid=None)], r"t\.jsonl:2: field 'request\.request_id': expected a string, missing"),
    ([_dyn(inp=20)], r"t\.jsonl:1: field 'request\.replay\.input_sequence_hashes': expected 2 ids for input_length 20"),
    ([_dyn(), _dyn(rid="b", bs=32)], r"t\.jsonl:2: field 'request\.replay\.trace_block_size': expected 16"),
    ([_dyn(parent="zz")], r"t\.jsonl:1: field 'agent_context\.parent_session_id': session 'zz' has no request"),
    ([_dyn(agent_context=None)], r"t\.jsonl:1: field 'agent_context': expected an object with session_id"),
    ([_dyn(rid="a", session="x", parent="y"), _dyn(rid="b", session="y", parent="x")], r"sessions form a cycle"),
    ([_dyn(event_type="tool_start")], r"t\.jsonl:1: field 'event_type': expected one of 'request_end'"),
    ([_dyn(), _dyn(rid="a", start=5)], r"t\.jsonl:2: request_id 'a' repeats the node of .*t\.jsonl:1"),
    ([_dyn(out=0)], r"t\.jsonl:1: field 'request\.output_tokens': expected an integer in \[1, "),
])
def test_dynamo_errors_name_file_line_and_field(tmp_path, rows, match):
    with pytest.raises(WorkloadError, match=match):
        READERS["dynamo"](write(tmp_path, *rows), None)
