"""The Weka AgentX corpus format: one play per line, lowered into dependency streams.

A play lists its main agent's requests (``type`` ``n`` or ``s``: ``t`` seconds from the
play's zero, ``model``, ``in``, ``out`` (0 = prefill only), ``hash_ids`` of ``block_size``
tokens, ``api_time`` seconds) and ``subagent`` markers (``t``, ``agent_id``,
``subagent_type``, ``status``: ``completed`` = blocking, ``async_launched`` = background,
optional ``duration_ms``, nested ``requests``).  The trace records no dependencies; they
are inferred, in the spirit of AISimulate's Weka lowering (described in our own words):

- **streams**: in time order, a request continues the stream whose last prompt is a prefix
  of its own (same model, and that last request had ended by this one's start); otherwise
  it starts a stream, forked from the stream sharing its longest prefix, or, sharing none,
  anchored to the play's first request;
- within a stream: the previous request's completion, plus the gap to this start
  (``t - (prev.t + prev.api_time)``, at least 0) as tool time;
- a fork or an anchored stream: the source's completion plus the gap when the source had
  ended by then, else its dispatch plus ``t - source.t``;
- a subagent's first request: spawned from the main-agent request before the marker (the
  same rule: dispatch-anchored while that request runs, else completion-anchored); a
  blocking subagent's last-ending request joins into the first later main-agent request
  starting at or after the subagent's end;
- nested ``t`` are relative to the marker when any of the corpus's nested requests would
  otherwise start before its marker, else absolute;
- ids are scoped to the play; a partly filled last block is the request's own.

Every node also keeps its recorded start as its floor (``not_before``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servesim.errors import WorkloadError

from .graph import AgenticGraph, GraphBuilder, RawDep
from .rows import Row, json_rows

_STATUSES = ("completed", "async_launched")


@dataclass
class _Req:
    rid: str
    t: float
    end: float
    model: str
    inp: int
    out: int
    ids: list[int]
    where: str
    agent: str


def read_weka(path: Path, block_size: int | None) -> AgenticGraph:
    plays = [row for row in json_rows(path)]
    if not plays:
        raise WorkloadError(f"{path}: no plays in the trace")
    bs = None
    relative = False
    parsed = []
    for row in plays:
        row.forbid(("schema", "wait_for", "dependencies", "request_id"), "weka", "agentic_mooncake")
        b = row.integer("block_size", 1)
        if block_size is not None and b != block_size:
            raise row.fail("block_size", f"the config's workload.block_size ({block_size}) or the two to agree", b)
        if bs is not None and b != bs:
            raise row.fail("block_size", f"{bs}, the block size of the corpus's first play", b)
        bs = b
        scope = row.string("hash_id_scope", "local")
        if scope != "local":
            raise row.fail("hash_id_scope", "'local'", scope)
        main, subs = _entries(row)
        for marker, reqs in subs:
            if any(r.obj.get("t", 0) < marker.number("t") for r in reqs):
                relative = True
        parsed.append((row, main, subs))
    assert bs is not None
    g = GraphBuilder(f"weka {path.name}", bs, local_ids=True)
    for row, main, subs in parsed:
        _lower_play(g, row, main, subs, relative)
    return g.build()


def _entries(row: Row) -> tuple[list[Row], list[tuple[Row, list[Row]]]]:
    main, subs = [], []
    for k, e in enumerate(row.items("requests")):
        er = row.child(e, f"requests[{k}].")
        kind = er.obj.get("type")
        if kind in ("n", "s"):
            main.append(er)
        elif kind == "subagent":
            inner = [er.child(x, f"requests[{j}].") for j, x in enumerate(er.items("requests"))]
            for x in inner:
                if x.obj.get("type") not in ("n", "s"):
                    raise x.fail("type", "'n' or 's' inside a subagent", x.obj.get("type"))
            subs.append((er, inner))
            main.append(er)  # kept in outer order: the marker's owner is the request before it
        else:
            raise er.fail("type", "'n', 's' or 'subagent'", kind)
    return main, subs


def _request(r: Row, rid: str, agent: str, base: float) -> _Req:
    t = base + r.number("t")
    api = r.number("api_time", 0.0)
    return _Req(rid, t, t + api, r.string("model", ""), r.integer("in", 1), r.integer("out", 0),
                r.ids("hash_ids", required=False) or [], r.where, agent)


def _lower_play(g: GraphBuilder, row: Row, outer: list[Row], subs, relative: bool) -> None:
    play = row.string("id")
    main: list[_Req] = []
    owner_before: dict[int, _Req | None] = {}
    sub_of: dict[int, tuple[Row, list[Row]]] = {id(m): (m, reqs) for m, reqs in subs}
    for k, e in enumerate(outer):
        if e.obj.get("type") == "subagent":
            owner_before[id(e)] = main[-1] if main else None
        else:
            main.append(_request(e, f"{play}/{k}", "main", 0.0))
    if not main:
        raise row.fail("requests", "at least one main-agent request (type 'n' or 's')")
    root = min(main, key=lambda r: (r.t, r.rid))
    _streams(g, play, main, root, "main", "main")
    for e in outer:
        if e.obj.get("type") != "subagent":
            continue
        marker, inner = sub_of[id(e)]
        status = marker.choice("status", _STATUSES, "completed")
        mt = marker.number("t")
        agent = marker.string("subagent_type", "subagent")
        aid = marker.string("agent_id")
        reqs = [_request(x, f"{play}/{aid}/{j}", agent, mt if relative else 0.0) for j, x in enumerate(inner)]
        owner = owner_before[id(e)]
        if owner is None:
            raise marker.fail("t", "a main-agent request before the subagent marker")
        if not reqs:
            continue
        first = min(reqs, key=lambda r: (r.t, r.rid))
        _streams(g, play, reqs, first, agent, aid, spawn_from=owner)
        if status == "completed":  # blocking: the main agent waits for it
            last = max(reqs, key=lambda r: (r.end, r.rid))
            end = max(last.end, mt + (marker.number("duration_ms", 0.0) or 0.0) / 1000.0)
            later = [m for m in main if m.t >= end - 1e-6 and m.t > owner.t]
            if later:
                joiner = min(later, key=lambda r: (r.t, r.rid))
                g.add_dependency(joiner.rid, RawDep(last.rid, "completion", max(0.0, joiner.t - last.end), "other",
                                                    "join", marker.at("status")))


def _anchor(src: _Req, t: float, where: str, relation: str) -> RawDep:
    if src.end <= t:
        return RawDep(src.rid, "completion", t - src.end, "tool", relation, where)
    return RawDep(src.rid, "dispatch", max(0.0, t - src.t), "other", relation, where)


def _streams(g: GraphBuilder, play: str, reqs: list[_Req], root: _Req, agent: str, key: str,
             spawn_from: _Req | None = None) -> None:
    """Add ``reqs`` (one agent's) as nodes, linked into streams (see the module docstring)."""
    chains: list[list[_Req]] = []
    for r in sorted(reqs, key=lambda r: (r.t, r.rid)):
        deps: list[RawDep] = []
        cont = [c for c in chains if c[-1].model == r.model and c[-1].end <= r.t + 1e-9
                and r.ids[:len(c[-1].ids)] == c[-1].ids]
        if cont:
            c = max(cont, key=lambda c: (len(c[-1].ids), c[-1].t))
            deps.append(RawDep(c[-1].rid, "completion", max(0.0, r.t - c[-1].end), "tool", "sequence", r.where))
            c.append(r)
            session = f"{play}/{key}/s{chains.index(c)}"
        else:
            if r is root and spawn_from is not None:
                deps.append(_anchor(spawn_from, r.t, r.where, "spawn"))
            elif r is not root:
                best = max(chains, key=lambda c: (_common(c[-1].ids, r.ids), c[-1].t), default=None)
                src = best[-1] if best is not None and _common(best[-1].ids, r.ids) else root
                deps.append(_anchor(src, r.t, r.where, "spawn"))
            chains.append([r])
            session = f"{play}/{key}/s{len(chains) - 1}"
        g.add(r.rid, play, where=r.where, input_length=r.inp, output_length=r.out, hash_ids=r.ids, deps=deps,
              not_before=r.t, session=session, agent=agent, model=r.model, recorded_start=r.t, recorded_end=r.end,
              private_tail=True)


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
