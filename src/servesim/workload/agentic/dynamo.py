"""Dynamo request traces (``dynamo.request.trace.v1``) lowered into an :class:`AgenticGraph`.

A trace is JSON lines of events.  ``request_end`` events are the model requests: the agent
context (``session_id``, optional ``parent_session_id``), the request's id, model, receive
time (``request_received_ms``, unix ms), output tokens, its end (``total_time_ms`` after the
receive time, else the event's ``event_time_unix_ms``) and replay metadata
(``trace_block_size``, ``input_length`` and one ``input_sequence_hashes`` id per block).
``tool_end`` / ``tool_error`` events are accepted and checked for their schema; their timing
is not used (the lowering below infers launches and joins from the request times).

Lowering (docs/workload.md, ``dynamo``):

- a session's requests, in order of their receive time, each follow the previous one's
  completion;
- a child session's first request follows the completion of the parent-session request that
  started last before it; a child session whose parent had started nothing yet has no such
  dependency (its floor alone releases it);
- the parent-session request that starts first at or after a child session's last end joins
  that child's last-ending request;
- the delay of every dependency of a request is its recorded residual: its receive time less
  the latest recorded end among its dependencies, at least 0;
- a root session (no parent) and every session below it form one play; every request keeps
  its recorded receive time as its floor.
"""

from __future__ import annotations

import bisect
from pathlib import Path

from servesim.errors import WorkloadError

from .graph import AgenticGraph, GraphBuilder, RawDep
from .rows import Row, json_rows

SCHEMA = "dynamo.request.trace.v1"
EVENTS = ("request_end", "tool_end", "tool_error")


class _Req:
    __slots__ = ("rid", "session", "parent", "model", "start", "end", "out", "inp", "ids", "where", "line")

    def __init__(self, rid, session, parent, model, start, end, out, inp, ids, where, line) -> None:
        self.rid, self.session, self.parent, self.model = rid, session, parent, model
        self.start, self.end, self.out, self.inp, self.ids = start, end, out, inp, ids
        self.where, self.line = where, line


def read_dynamo(path: Path, block_size: int | None) -> AgenticGraph:
    """Read a ``dynamo.request.trace.v1`` file (plain or gzip) and lower it (module docstring)."""
    reqs: list[_Req] = []
    bs: int | None = None
    bs_where = ""
    for row in json_rows(path):
        if row.obj.get("schema") != SCHEMA:
            raise row.fail("schema", f"'{SCHEMA}'", row.obj.get("schema"))
        event = row.choice("event_type", EVENTS, "")
        if not event:
            raise row.fail("event_type", "one of " + ", ".join(repr(e) for e in EVENTS))
        if event != "request_end":
            continue
        if not row.has("agent_context"):
            raise row.fail("agent_context", "an object with session_id (a trace without agent context "
                           "has no dependencies to lower)")
        ctx = row.child(row.obj["agent_context"], "agent_context.")
        req = row.child(row.obj.get("request"), "request.")
        replay = req.child(req.obj.get("replay"), "replay.")
        rbs = replay.integer("trace_block_size", 1)
        if bs is None:
            bs, bs_where = rbs, replay.at("trace_block_size")
            if block_size is not None and block_size != bs:
                raise WorkloadError(f"{bs_where}: the trace's block size {bs} differs from workload.block_size "
                                    f"{block_size}")
        elif rbs != bs:
            raise replay.fail("trace_block_size", f"{bs}, the block size of the trace's first request ({bs_where})",
                              rbs)
        inp = replay.integer("input_length", 1)
        ids = replay.ids("input_sequence_hashes")
        need = -(-inp // bs)
        if len(ids) != need:
            raise replay.fail("input_sequence_hashes", f"{need} ids for input_length {inp} at block size {bs}",
                              f"{len(ids)} ids")
        start = req.number("request_received_ms")
        if req.has("total_time_ms"):
            end = start + req.number("total_time_ms")
        elif row.has("event_time_unix_ms"):
            end = row.number("event_time_unix_ms")
        else:
            raise req.fail("total_time_ms", "the request's duration (or the event's event_time_unix_ms)")
        if end < start:
            raise row.fail("event_time_unix_ms", f"a time at or after request.request_received_ms {start:g}", end)
        reqs.append(_Req(req.string("request_id"), ctx.string("session_id"), ctx.string("parent_session_id", None),
                         req.string("model", ""), start, end, req.integer("output_tokens", 1), inp, ids,
                         row.where, row.line))
    if not reqs:
        raise WorkloadError(f"{path}: no request_end events in the trace")
    return _lower(path, reqs, bs)


def _lower(path: Path, reqs: list[_Req], bs: int) -> AgenticGraph:
    sessions: dict[str, list[_Req]] = {}
    for r in reqs:
        sessions.setdefault(r.session, []).append(r)
    parent_of: dict[str, str | None] = {}
    for sid, rs in sessions.items():
        parents = {r.parent for r in rs}
        if len(parents) > 1:
            a = rs[0]  # the session's first line
            b = next(r for r in rs if r.parent != a.parent)
            raise WorkloadError(f"{b.where}: field 'agent_context.parent_session_id': session '{sid}' names parent "
                                f"{b.parent!r} here and {a.parent!r} at line {a.line}")
        parent = rs[0].parent
        if parent is not None and parent not in sessions:
            raise WorkloadError(f"{rs[0].where}: field 'agent_context.parent_session_id': session '{parent}' has no "
                                "request in the trace")
        parent_of[sid] = parent
        rs.sort(key=lambda r: (r.start, r.line))
    play_of: dict[str, str] = {}
    for sid in sessions:
        chain, s = [], sid
        while s not in play_of and parent_of[s] is not None:
            if s in chain:
                raise WorkloadError(f"{sessions[s][0].where}: field 'agent_context.parent_session_id': sessions "
                                    f"form a cycle ({' -> '.join(chain[chain.index(s):] + [s])})")
            chain.append(s)
            s = parent_of[s]
        root = play_of.get(s, s)
        for c in chain:
            play_of[c] = root
        play_of[s] = root
    t0 = min(r.start for r in reqs)
    deps: dict[str, list[tuple[_Req, str]]] = {r.rid: [] for r in reqs}
    for sid, rs in sessions.items():
        for prev, r in zip(rs, rs[1:]):
            deps[r.rid].append((prev, "sequence"))
        parent = parent_of[sid]
        if parent is None:
            continue
        prs = sessions[parent]
        starts = [p.start for p in prs]
        k = bisect.bisect_left(starts, rs[0].start) - 1  # the last parent request started before it
        if k >= 0:
            deps[rs[0].rid].append((prs[k], "spawn"))
        last = max(rs, key=lambda r: (r.end, r.line))
        j = bisect.bisect_left(starts, last.end)  # the first parent request starting at or after its end
        if j < len(prs):
            deps[prs[j].rid].append((last, "join"))
    b = GraphBuilder(f"dynamo {path.name}", bs)
    for r in sorted(reqs, key=lambda r: r.line):
        ds = deps[r.rid]
        residual = max(0.0, (r.start - max(d.end for d, _ in ds)) / 1000.0) if ds else 0.0
        start = (r.start - t0) / 1000.0
        b.add(r.rid, play_of[r.session], where=r.where, input_length=r.inp, output_length=r.out, hash_ids=r.ids,
              deps=[RawDep(d.rid, "completion", residual, "other", rel, f"{r.where}: dependency on '{d.rid}'")
                    for d, rel in ds],
              not_before=start, session=r.session, agent="main" if parent_of[r.session] is None else "subagent",
              model=r.model, recorded_start=start, recorded_end=(r.end - t0) / 1000.0)
    return b.build()
