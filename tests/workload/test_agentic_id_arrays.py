"""Long ``hash_ids`` lists read straight into arrays (``rows.py``, ``graph.py``'s interning) give
the graph, and the errors, that decoding them as JSON lists gives."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from servesim.errors import WorkloadError
from servesim.workload.agentic import graph, rows, trace_ids
from servesim.workload.agentic.formats import READERS

V2_HEADER = {"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": 4}


def _v2_rows(rng: random.Random, scope: str, sparse: bool) -> list[dict]:
    """Plays of growing contexts (each turn lists its whole prompt), ids dense or far apart."""
    out = []
    for p in range(3):
        ctx: list[int] = []
        for t in range(4):
            ctx = ctx + [rng.randrange(2**60) if sparse else rng.randrange(400) for _ in range(rng.randint(1, 90))]
            deps = [{"request_id": f"p{p}/{t - 1}", "delay_ms": 5}] if t else []
            out.append({"request_id": f"p{p}/{t}", "play_id": f"p{p}", "session_id": f"p{p}",
                        "not_before_ms": 10.0 * t, "input_length": 4 * len(ctx) - rng.randrange(4),
                        "output_length": 3, "hash_ids": ctx, "dependencies": deps})
    out.insert(0, dict(V2_HEADER, hash_id_scope=scope))
    return out


def _write(tmp_path: Path, objs: list, name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(o if isinstance(o, str) else json.dumps(o) for o in objs) + "\n")
    return path


def _read_both(path: Path, fmt: str, monkeypatch) -> tuple:
    """The graph (or error text) read with arrays, and read as JSON lists."""
    def read():
        try:
            return READERS[fmt](path, None)
        except WorkloadError as exc:
            return str(exc)

    fast = read()
    with monkeypatch.context() as m:
        m.setattr(rows, "_ARRAY_MIN_CHARS", 10**9)
        plain = read()
    return fast, plain


@pytest.mark.parametrize("scope", ["local", "global"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_graph_equals_the_json_lists_graph(tmp_path, monkeypatch, scope, sparse, seed):
    path = _write(tmp_path, _v2_rows(random.Random(seed), scope, sparse))
    assert any(type(r.obj.get("hash_ids")) is np.ndarray for r in rows.json_rows(path, ids_as_array=True))
    fast, plain = _read_both(path, "agentic_mooncake", monkeypatch)
    assert not isinstance(fast, str) and fast == plain


def test_delta_and_dag_formats_equal_the_json_lists_graph(tmp_path, monkeypatch):
    long_ids = list(range(7, 300))
    dag = [{"id": "a", "input_length": 4 * len(long_ids), "output_length": 8, "hash_ids": long_ids},
           {"id": "b", "extends": "a", "input_length": 40, "output_length": 1, "hash_ids": list(range(500, 600)),
            "deps": [{"id": "a"}]}]
    fast, plain = _read_both(_write(tmp_path, dag, "d.jsonl"), "servesim_dag", monkeypatch)
    assert not isinstance(fast, str) and fast == plain
    delta = [{"session_id": "s", "timestamp": 0, "input_length": 4 * 293, "output_length": 2, "hash_ids": long_ids},
             {"session_id": "s", "input_length": 4 * 100 - 1, "output_length": 2, "hash_ids": list(range(900, 1000))}]
    fast, plain = _read_both(_write(tmp_path, delta, "m.jsonl"), "mooncake-delta", monkeypatch)
    assert not isinstance(fast, str) and fast == plain


def test_lines_the_array_path_must_leave_to_json(tmp_path, monkeypatch):
    """The list's text first found elsewhere on the line (a string, another field), a repeated
    key, elements that are not plain ids: the same graph or the same error as JSON lists."""
    ids = list(range(100))
    text = json.dumps(ids)
    base = {"request_id": "r", "play_id": "p", "session_id": "p", "not_before_ms": 0, "output_length": 1}
    cases = [
        dict(base, note=text, hash_ids=ids),
        dict(base, other=ids, hash_ids=ids),
        '{"request_id": "r", "play_id": "p", "session_id": "p", "not_before_ms": 0, "output_length": 1, '
        f'"hash_ids": {json.dumps(ids[:90])}, "hash_ids": {text}}}',
        dict(base, hash_ids=ids[:50] + [-1] + ids[50:]),
        dict(base, hash_ids=ids[:50] + [2**64] + ids[50:]),
        dict(base, hash_ids=ids[:50] + [1.5] + ids[50:]),
        dict(base, hash_ids=ids[:50] + [True] + ids[50:]),
        '{"request_id": "r", "play_id": "p", "session_id": "p", "not_before_ms": 0, "output_length": 1, '
        f'"hash_ids": {text[:-1]}',
    ]
    for k, case in enumerate(cases):
        fast, plain = _read_both(_write(tmp_path, [V2_HEADER, case], f"c{k}.jsonl"), "agentic_mooncake", monkeypatch)
        assert fast == plain, k


@pytest.mark.parametrize("span", [500, 5000, 2**63])
@pytest.mark.parametrize("version", ["python", "bound"])
def test_ranks_are_sorted_unique_positions(span, version):
    """Both ways (a table indexed by id, left dirty by an earlier scope, or a sort), in Python
    and as bound (compiled where built; ids dense or spread over the table), rank as
    ``np.unique`` and a binary search do; the table is offered only to small ids."""
    rank_ids = trace_ids.PYTHON_VERSIONS["rank_ids"] if version == "python" else trace_ids.rank_ids
    sparse = span > 10**6
    rng = np.random.default_rng(3)
    flat = rng.integers(0, span, size=2000, dtype=np.uint64)
    table = graph._rank_table(None, int(flat.max()), 4 * flat.size + 1024)
    assert (table is None) == sparse
    if not sparse:
        assert graph._rank_table(table, int(flat.max()), 4 * flat.size) is table
        assert graph._rank_table(table, table.size, 10**6).size > table.size
    want = np.unique(flat)
    for t in ([None] if sparse else [None, table, table]):
        uniq, pos = rank_ids(flat, t)
        assert uniq.dtype == np.uint64 and pos.dtype == np.int64
        assert np.array_equal(uniq, want) and np.array_equal(pos, want.searchsorted(flat))
        if t is not None:
            rank_ids(flat[::-3].copy(), t)  # another scope writes over it
