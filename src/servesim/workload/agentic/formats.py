"""Readers that lower the field's agentic trace formats into an :class:`AgenticGraph`.

Each reader knows one format's fields (docs/workload.md, "Agentic traces", has the tables)
and hands nodes to a :class:`GraphBuilder`, which checks ids, cycles and delta bases for all
of them.  Times in the files are milliseconds unless the field name says ``_s``.

- ``servesim_dag``: servesim's own JSON lines (an optional header, one node per line);
- ``agentic_mooncake``: AISimulate's graph rows, v1 (flat rows with ``wait_for``) or v2 (a
  ``dynamo.agentic_mooncake`` header row, then rows with ``play_id``, ``not_before_ms`` and
  typed ``dependencies``), told apart by the first row;
- ``mooncake-delta``: Mooncake session rows whose later turns list only the new input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from servesim.errors import WorkloadError
from servesim.workload.request import MAX_TOKENS

from .graph import DEP_KINDS, RELATIONS, TRIGGERS, AgenticGraph, GraphBuilder, RawDep
from .rows import Row, json_rows, plain_number
from .trace_ids import ids_valid
from .weka import read_weka
from .aiperf_dag import read_aiperf_dag
from .dynamo import read_dynamo

#: Tokens per ``hash_ids`` block when neither the config nor a header says (Mooncake's).
DEFAULT_BLOCK_SIZE = 512
#: Block size of the ids made for formats that name no blocks (unless the config sets one).
SYNTHESIZED_BLOCK_SIZE = 16
DAG_FORMAT = "servesim.dag"
V2_SCHEMA = "dynamo.agentic_mooncake"


# ---------------------------------------------------------------------------------------
# servesim's own DAG JSON lines
# ---------------------------------------------------------------------------------------
def read_servesim_dag(path: Path, block_size: int | None) -> AgenticGraph:
    """One node per line (docs/workload.md, "servesim's DAG format").

    An optional first line ``{"format": "servesim.dag", "version": 1, "block_size": B,
    "hash_id_scope": "global" | "play"}`` states the block size (then the config's must
    agree) and whether equal ids in two plays are the same content."""
    rows = json_rows(path, ids_as_array=True)
    first = next(rows, None)
    if first is None:
        raise WorkloadError(f"{path}: no requests in the trace")
    local = False
    if "format" in first.obj:
        if first.obj.get("format") != DAG_FORMAT:
            raise first.fail("format", f"'{DAG_FORMAT}' (or no header line)", first.obj.get("format"))
        if first.obj.get("version", 1) != 1:
            raise first.fail("version", "1", first.obj.get("version"))
        block_size = _header_block_size(first, block_size)
        local = first.choice("hash_id_scope", ("global", "play"), "global") == "play"
        first = None
    b = GraphBuilder(f"servesim DAG {path.name}", block_size or DEFAULT_BLOCK_SIZE, local_ids=local)
    if first is not None:
        _dag_node(b, first)
    for row in rows:
        _dag_node(b, row)
    return b.build()


def _header_block_size(row: Row, configured: int | None) -> int:
    bs = row.integer("block_size", 1)
    if configured is not None and configured != bs:
        raise row.fail("block_size", f"the config's workload.block_size ({configured}) or the two to agree", bs)
    return bs


def _dag_node(b: GraphBuilder, row: Row) -> None:
    row.forbid(("schema", "wait_for", "dependencies"), "servesim_dag", "agentic_mooncake")
    row.forbid(("requests",), "servesim_dag", "weka")
    if "format" in row.obj:
        raise WorkloadError(f"{row.at('format')}: a header is allowed only on the first line")
    node_id = row.string("id")
    extends = row.string("extends", None)
    deps = []
    for k, d in enumerate(row.items("deps")):
        dr = row.child(d, f"deps[{k}].")
        deps.append(RawDep(dr.string("id"), dr.choice("on", TRIGGERS, "completion"), dr.number("delay_s", 0.0),
                           dr.choice("kind", DEP_KINDS, "other"), dr.choice("relation", RELATIONS, "sequence"),
                           dr.at("id")))
    start = row.number("start_s", None)
    b.add(node_id, row.string("play", "play"), where=row.where, id_field="id",
          input_length=row.integer("input_length", 1), output_length=row.integer("output_length", 0),
          hash_ids=row.ids("hash_ids", required=False), delta_of=extends, deps=deps,
          not_before=start, session=row.string("session", None), agent=row.string("agent", "main"),
          model=row.string("model", ""), recorded_start=start, recorded_end=row.number("end_s", None))


# ---------------------------------------------------------------------------------------
# AISimulate agentic_mooncake, v1 and v2
# ---------------------------------------------------------------------------------------
_V2_ROW_KEYS = ("play_id", "not_before_ms", "dependencies")


def read_agentic_mooncake(path: Path, block_size: int | None) -> AgenticGraph:
    """v2 when the first row is its header, else v1 rows."""
    rows = json_rows(path, ids_as_array=True)
    first = next(rows, None)
    if first is None:
        raise WorkloadError(f"{path}: no requests in the trace")
    if "schema" in first.obj:
        return _read_v2(path, first, rows, block_size)
    return _read_v1(path, first, rows, block_size or DEFAULT_BLOCK_SIZE)


def _read_v1(path: Path, first: Row, rows, block_size: int) -> AgenticGraph:
    """Flat rows: ``wait_for`` (ids that must all complete), ``delay``/``delay_ms`` +
    ``tool_wait_ms`` after the last of them; ``timestamp`` gates roots only.  Plays are the
    connected parts of the dependency graph, named after their earliest root."""
    raw = []
    for row in _chain(first, rows):
        row.forbid(("schema",), "agentic_mooncake v1 (no header row)", "agentic_mooncake v2 header")
        row.forbid(_V2_ROW_KEYS, "agentic_mooncake v1 (no header row)", "agentic_mooncake v2")
        rid = row.string("request_id")
        if row.has("delay") and row.has("delay_ms"):
            raise WorkloadError(f"{row.at('delay_ms')}: give 'delay' or 'delay_ms', not both")
        delay = (row.number("delay", None) or row.number("delay_ms", 0.0) or 0.0) + row.number("tool_wait_ms", 0.0)
        wait_for = row.items("wait_for")
        for k, w in enumerate(wait_for):
            if not isinstance(w, str) or not w:
                raise row.fail(f"wait_for[{k}]", "a request id (string)", w)
        ts = _first_of(row, ("timestamp", "created_time"))
        inp, ids = _length_and_ids(row, block_size)
        raw.append((row, rid, wait_for, delay, ts, inp, ids))
    plays = _components([(rid, wf, ts or 0.0) for _, rid, wf, _, ts, _, _ in raw])
    b = GraphBuilder(f"agentic_mooncake v1 {path.name}", block_size)
    relation = {}
    for row, rid, wait_for, delay, ts, inp, ids in raw:
        relation = "join" if len(wait_for) > 1 else "sequence"
        deps = [RawDep(w, "completion", delay / 1000.0, "tool" if row.number("tool_wait_ms", 0.0) else "other",
                       relation, row.at(f"wait_for[{k}]")) for k, w in enumerate(wait_for)]
        floor = (ts or 0.0) / 1000.0 if not wait_for else None
        b.add(rid, plays[rid], where=row.where, input_length=inp, output_length=_output(row),
              hash_ids=ids, deps=deps, not_before=floor, session=row.string("session_id", None),
              recorded_start=floor)
    return b.build()


def _read_v2(path: Path, header: Row, rows, block_size: int | None) -> AgenticGraph:
    if header.obj.get("schema") != V2_SCHEMA:
        raise header.fail("schema", f"'{V2_SCHEMA}'", header.obj.get("schema"))
    if header.obj.get("version") != 2:
        raise header.fail("version", "2", header.obj.get("version"))
    bs = _header_block_size(header, block_size)
    scope = header.choice("hash_id_scope", ("local", "global"), "local")
    b = GraphBuilder(f"agentic_mooncake v2 {path.name}", bs, local_ids=scope == "local")
    for row in rows:
        plain = _plain_v2_row(row, bs)
        if plain is not None:
            rid, play, session, model, inp, out, ids, deps, nb, end = plain
            b.add(rid, play, where=row.where, input_length=inp, output_length=out, hash_ids=ids, deps=deps,
                  not_before=nb, session=session, model=model, recorded_start=nb, recorded_end=end)
            continue
        if "schema" in row.obj:
            raise WorkloadError(f"{row.at('schema')}: a second header row; a file holds one trace")
        row.forbid(("wait_for",), "agentic_mooncake v2", "agentic_mooncake v1")
        for key in ("play_id", "session_id", "not_before_ms"):
            if key not in row.obj:
                raise row.fail(key, "a value (required by agentic_mooncake v2)")
        deps = []
        for k, d in enumerate(row.items("dependencies")):
            dr = row.child(d, f"dependencies[{k}].")
            relation = dr.choice("relation", ("sequence", "spawn", "join", "replay_barrier"), "sequence")
            deps.append(RawDep(dr.string("request_id"), dr.choice("trigger", ("dispatch", "completion"), "completion"),
                               dr.number("delay_ms", 0.0) / 1000.0, "other",
                               "barrier" if relation == "replay_barrier" else relation, dr.at("request_id")))
        inp, ids = _length_and_ids(row, bs)
        nb = row.number("not_before_ms") / 1000.0
        api = row.number("recorded_api_time_ms", None)
        b.add(row.string("request_id"), row.string("play_id"), where=row.where, input_length=inp,
              output_length=_output(row), hash_ids=ids, deps=deps, not_before=nb,
              session=row.string("session_id"), model=row.string("model", ""), recorded_start=nb,
              recorded_end=nb + api / 1000.0 if api is not None else None)
    if not len(b):
        raise WorkloadError(f"{path}: a header row and no requests")
    return b.build()


_V2_RELATIONS = {"sequence": "sequence", "spawn": "spawn", "join": "join", "replay_barrier": "barrier"}
_V2_TRIGGERS = frozenset(("dispatch", "completion"))


def _plain_v2_row(row: Row, bs: int) -> tuple | None:
    """A v2 row's node as :func:`_read_v2` reads it, where every field is written plainly
    (strings as non-blank strings, lengths as ints in range, times as finite numbers >= 0,
    ``input_length`` given and within the ids' blocks, no key of another format); None
    otherwise, and the row is read field by field, which words any error.

    Most rows of a large trace are plain: one look at each value here, where the field
    readers' checks and messages cost several calls a field (a fifth of reading an AgentX
    trace, before its graph is built)."""
    obj = row.obj
    if "schema" in obj or "wait_for" in obj:
        return None
    rid, play, session = obj.get("request_id"), obj.get("play_id"), obj.get("session_id")
    if type(rid) is not str or type(play) is not str or type(session) is not str or not rid.strip() \
            or not play.strip() or not session.strip():
        return None
    model = obj.get("model")
    if model is None:
        model = ""
    elif type(model) is not str or not model.strip():
        return None
    nb = plain_number(obj.get("not_before_ms"))
    if nb is None:
        return None
    api = obj.get("recorded_api_time_ms")
    if api is not None:
        api = plain_number(api)
        if api is None:
            return None
    ids = obj.get("hash_ids")
    if type(ids) is list:
        if not ids_valid(ids):
            return None
    elif type(ids) is not np.ndarray:
        return None
    inp, out = obj.get("input_length"), obj.get("output_length")
    if type(inp) is not int or type(out) is not int or not 1 <= inp <= MAX_TOKENS or not 0 <= out <= MAX_TOKENS \
            or inp > len(ids) * bs:
        return None
    deps = []
    raw = obj.get("dependencies")
    if raw is not None:
        if type(raw) is not list:
            return None
        for k, d in enumerate(raw):
            if type(d) is not dict:
                return None
            source, trigger, relation = d.get("request_id"), d.get("trigger"), d.get("relation")
            delay = d.get("delay_ms")
            delay = 0.0 if delay is None else plain_number(delay)
            if type(source) is not str or not source.strip() or delay is None:
                return None
            if trigger is None:
                trigger = "completion"
            elif type(trigger) is not str or trigger not in _V2_TRIGGERS:
                return None
            if relation is None:
                relation = "sequence"
            elif type(relation) is not str or relation not in _V2_RELATIONS:
                return None
            deps.append(RawDep(source, trigger, delay / 1000.0, "other", _V2_RELATIONS[relation],
                               f"{row.where}: field 'dependencies[{k}].request_id'"))
    nb /= 1000.0
    return rid, play, session, model, inp, out, ids, deps, nb, nb + api / 1000.0 if api is not None else None


# ---------------------------------------------------------------------------------------
# mooncake-delta
# ---------------------------------------------------------------------------------------
def read_mooncake_delta(path: Path, block_size: int | None) -> AgenticGraph:
    """Mooncake rows; a session's later turns give only the new input (``input_length`` and
    ``hash_ids`` of the delta) and follow the previous turn's completion after ``delay`` ms.
    Each session is a play."""
    block_size = block_size or DEFAULT_BLOCK_SIZE
    b = GraphBuilder(f"mooncake-delta {path.name}", block_size)
    last: dict[str, str] = {}
    for row in json_rows(path, ids_as_array=True):
        row.forbid(("wait_for", "dependencies", "schema"), "mooncake-delta", "agentic_mooncake")
        session = row.string("session_id", None)
        rid = row.string("request_id", None) or f"line{row.line}"
        inp, ids = _length_and_ids(row, block_size)
        prev = last.get(session) if session is not None else None
        ts = _first_of(row, ("timestamp", "created_time"))
        if prev is None:
            if ts is None:
                raise row.fail("timestamp", "a number >= 0 (ms) on a session's first row")
            b.add(rid, session or rid, where=row.where, input_length=inp, output_length=_output(row),
                  hash_ids=ids, not_before=ts / 1000.0, session=session or rid, recorded_start=ts / 1000.0)
        else:
            delay = _first_of(row, ("delay", "delay_ms")) or 0.0
            b.add(rid, session, where=row.where, input_length=inp, output_length=_output(row), hash_ids=ids,
                  delta_of=prev, deps=[RawDep(prev, "completion", delay / 1000.0, "think", "sequence", row.where)],
                  session=session)
        if session is not None:
            last[session] = rid
    return b.build()


# ---------------------------------------------------------------------------------------
# applied_compute_agentic (TRIE)
# ---------------------------------------------------------------------------------------
_TRIE_ARRAYS = ("assistant_response_length", "tool_call_output_length", "tool_call_latency")


def read_applied_compute_agentic(path: Path, block_size: int | None) -> AgenticGraph:
    """One session per row: ``num_turns`` assistant turns, each followed by a tool call
    (``tool_call_latency`` s) whose output (``tool_call_output_length`` tokens) joins the context,
    then a final answer (``final_assistant_response_length``).  Turn k's prompt is
    ``input_prompt_length`` plus every earlier answer and tool output; turn k+1 is released its
    tool latency after turn k completes.  No timestamps: plays start by lanes or a rate."""
    # The rows name no blocks: ids are made here, at a fine grid (a turn's context is reused up
    # to the last whole block before the new tokens; 16 tokens is vLLM's block).
    bs = block_size or SYNTHESIZED_BLOCK_SIZE
    b = GraphBuilder(f"applied_compute_agentic {path.name}", bs)
    for row in json_rows(path):
        row.forbid(("hash_ids", "wait_for", "dependencies", "requests"), "applied_compute_agentic", "another")
        n = row.integer("num_turns", 1)
        arrays = {}
        for name in _TRIE_ARRAYS:
            v = row.items(name)
            if len(v) != n:
                raise row.fail(name, f"a list of {n} values (num_turns)", f"{len(v)} values")
            for k, x in enumerate(v):
                if isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0 or \
                        (name != "tool_call_latency" and float(x) != int(x)):
                    raise row.fail(f"{name}[{k}]", "a number >= 0" if name == "tool_call_latency"
                                   else "an integer >= 0", x)
            arrays[name] = v
        play = row.string("session_id", None) or f"line{row.line}"
        prev = None
        for k in range(n + 1):
            rid = f"{play}/{k}"
            out = int(arrays["assistant_response_length"][k]) if k < n else row.integer("final_assistant_response_length", 0)
            if prev is None:
                b.add(rid, play, where=row.where, input_length=row.integer("input_prompt_length", 1), output_length=out,
                      session=play, not_before=0.0)
            else:
                tool = int(arrays["tool_call_output_length"][k - 1])
                b.add(rid, play, where=row.where, input_length=max(tool, 1), output_length=out, delta_of=prev,
                      deps=[RawDep(prev, "completion", float(arrays["tool_call_latency"][k - 1]), "tool", "sequence",
                                   row.at("tool_call_latency"))], session=play)
            prev = rid
    return b.build()


# ---------------------------------------------------------------------------------------
# shared pieces
# ---------------------------------------------------------------------------------------
def _chain(first: Row, rows):
    yield first
    yield from rows


def _first_of(row: Row, names: tuple[str, ...]) -> float | None:
    for n in names:
        if row.has(n):
            return row.number(n)
    return None


def _output(row: Row) -> int:
    for n in ("output_length", "output_tokens"):
        if row.has(n):
            return row.integer(n, 0)
    raise row.fail("output_length", "an integer >= 0")


def _length_and_ids(row: Row, block_size: int) -> tuple[int, list[int]]:
    """``input_length`` (or ``input_tokens``; default: the blocks' capacity) and ``hash_ids``,
    which must cover the input."""
    ids = row.ids("hash_ids")
    n = None
    for name in ("input_length", "input_tokens"):
        if row.has(name):
            n = row.integer(name, 1)
            break
    if n is None:
        n = len(ids) * block_size
    if n > len(ids) * block_size:
        raise row.fail("hash_ids", f"at least {-(-n // block_size)} ids for input_length {n} at block size "
                       f"{block_size}", f"{len(ids)} ids")
    if n < 1:
        raise row.fail("input_length", "an integer >= 1", n)
    return n, ids


def _components(rows: list[tuple[str, list[str], float]]) -> dict[str, str]:
    """Play of each v1 row: its connected part of the dependency graph, named after the part's
    earliest root (ties: the smaller id).  Unknown ids are left to the graph builder's check."""
    parent = {rid: rid for rid, _, _ in rows}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for rid, wf, _ in rows:
        for w in wf:
            if w in parent:
                a, c = find(rid), find(w)
                if a != c:
                    parent[a] = c
    best: dict[str, tuple[float, str]] = {}
    for rid, wf, ts in rows:
        if not wf:
            r = find(rid)
            key = (ts, rid)
            if r not in best or key < best[r]:
                best[r] = key
    return {rid: best.get(find(rid), (0.0, find(rid)))[1] for rid, _, _ in rows}


#: Reader of each format: ``(path, block size set in the config or None) -> graph``.
READERS: dict[str, Callable[[Path, int | None], AgenticGraph]] = {
    "servesim_dag": read_servesim_dag,
    "agentic_mooncake": read_agentic_mooncake,
    "mooncake-delta": read_mooncake_delta,
    "weka": read_weka,
    "applied_compute_agentic": read_applied_compute_agentic,
    "dag_jsonl": read_aiperf_dag,
    "dynamo": read_dynamo,
}
