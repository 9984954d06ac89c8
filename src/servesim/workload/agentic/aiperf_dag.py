"""AIPerf's ``dag_jsonl``: conversations whose turns fork (inherit the context) or spawn (start
fresh) other conversations, lowered into plays.

One line is a conversation: ``session_id``, ``turns`` (each with ``messages``, ``max_tokens``,
optional ``model``, ``delay`` in ms, ``forks``, ``spawns``) and optional
``pre_session_spawns``.  A conversation no other one names is a root; its tree is a play.

- turn k of a conversation extends turn k-1 (its prompt, its answer, then turn k's messages)
  and is released ``delay`` ms after turn k-1 completes;
- a FORK child's first turn extends the forking turn and follows its completion; a fork is
  never joined;
- a SPAWN child starts from its own messages, follows the spawning turn's completion, and
  gates the parent's turn ``join_at`` (default: the next one) on its last turn; a conversation
  spawned from several places runs once per place;
- ``pre_session_spawns`` start with the play, unjoined.

Messages carry text, not token counts: servesim has no tokenizer and counts one token per 4
characters of text content (at least one per turn); block ids are hashes of the text, so equal
text at equal positions shares a prefix.  Orchestrator conversations are not read.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from servesim.errors import WorkloadError

from .graph import AgenticGraph, GraphBuilder, RawDep
from .rows import Row, json_rows

CHARS_PER_TOKEN = 4
BLOCK_SIZE = 16


def read_aiperf_dag(path: Path, block_size: int | None) -> AgenticGraph:
    bs = block_size or BLOCK_SIZE
    convs: dict[str, Row] = {}
    order: list[str] = []
    for row in json_rows(path):
        row.forbid(("request_id", "hash_ids", "requests"), "aiperf_dag", "another")
        if row.obj.get("orchestrator"):
            raise WorkloadError(f"{row.at('orchestrator')}: orchestrator conversations are not supported")
        sid = row.string("session_id")
        if sid in convs:
            raise WorkloadError(f"{row.at('session_id')}: duplicate session_id '{sid}' (first on line "
                                f"{convs[sid].line})")
        if not row.items("turns"):
            raise row.fail("turns", "a non-empty list of turns")
        convs[sid] = row
        order.append(sid)
    if not convs:
        raise WorkloadError(f"{path}: no conversations in the trace")
    targets = _targets(convs)
    b = GraphBuilder(f"aiperf dag_jsonl {path.name}", bs)
    reader = _Lowering(b, convs, bs)
    for sid in order:
        if sid not in targets:
            reader.conversation(sid, sid, sid, None, fork_base=None, stack=())
    return b.build()


def _targets(convs: dict[str, Row]) -> set[str]:
    """Every conversation some turn forks or spawns, or a conversation spawns before it starts."""
    out: set[str] = set()
    for sid, row in convs.items():
        for k, t in enumerate(row.items("turns")):
            tr = row.child(t, f"turns[{k}].")
            for name, child in _branches(tr):
                if child not in convs:
                    raise WorkloadError(f"{tr.at(name)}: branch target '{child}' is not a session_id of the file")
                out.add(child)
        for j, child in enumerate(row.items("pre_session_spawns")):
            if child not in convs:
                raise WorkloadError(f"{row.at(f'pre_session_spawns[{j}]')}: '{child}' is not a session_id of the file")
            out.add(child)
    return out


def _branches(tr: Row) -> list[tuple[str, str]]:
    out = []
    for j, f in enumerate(tr.items("forks")):
        out.append((f"forks[{j}]", f if isinstance(f, str) else tr.child(f, f"forks[{j}].").string("child")))
    for j, s in enumerate(tr.items("spawns")):
        if isinstance(s, str):
            out.append((f"spawns[{j}]", s))
        else:
            for c in tr.child(s, f"spawns[{j}].").items("children"):
                out.append((f"spawns[{j}].children", c))
    return out


def _tokens(tr: Row) -> tuple[int, str]:
    """A turn's new input: tokens (4 characters each) and the text they stand for."""
    msgs = tr.items("messages")
    if not msgs:
        raise tr.fail("messages", "a non-empty list of messages")
    parts = []
    for k, m in enumerate(msgs):
        if not isinstance(m, dict) or "role" not in m:
            raise tr.fail(f"messages[{k}]", "an object with a 'role'", m)
        c = m.get("content")
        if isinstance(c, str):
            parts.append(f"{m['role']}:{c}")
        elif isinstance(c, list):
            parts.append(m["role"] + ":" + "".join(p.get("text", "") for p in c if isinstance(p, dict)))
        else:
            parts.append(str(m["role"]))
    text = "\n".join(parts)
    return max(1, -(-len(text) // CHARS_PER_TOKEN)), text


def _text_ids(text: str, bs: int, salt: str) -> list[int]:
    """Block ids of a text: a hash of everything up to the end of each block's characters."""
    step = bs * CHARS_PER_TOKEN
    h = hashlib.blake2b(salt.encode(), digest_size=8)
    out = []
    for i in range(0, max(len(text), 1), step):
        h.update(text[i:i + step].encode())
        out.append(int.from_bytes(h.copy().digest(), "little") >> 1)
    return out


class _Lowering:
    def __init__(self, b: GraphBuilder, convs: dict[str, Row], bs: int) -> None:
        self.b, self.convs, self.bs = b, convs, bs
        self.instances: dict[str, int] = {}

    def conversation(self, sid: str, play: str, prefix: str, after: RawDep | None, fork_base: str | None,
                     stack: tuple[str, ...]) -> str:
        """Add conversation ``sid``'s turns (ids under ``prefix``); returns its last turn's id."""
        if sid in stack:
            raise WorkloadError(f"{self.convs[sid].at('session_id')}: branch cycle "
                                + " -> ".join(f"'{s}'" for s in stack + (sid,)))
        row = self.convs[sid]
        stack = stack + (sid,)
        for j, child in enumerate(row.items("pre_session_spawns")):
            self.conversation(child, play, self._instance(child), None, None, stack)
        turns = [row.child(t, f"turns[{k}].") for k, t in enumerate(row.items("turns"))]
        joins: dict[int, list[str]] = {}
        prev = None
        for k, tr in enumerate(turns):
            rid = f"{prefix}/{k}"
            n_in, text = _tokens(tr)
            out = tr.integer("max_tokens", 1)
            delay = (tr.number("delay", 0.0) or 0.0) / 1000.0
            deps = [RawDep(d, "completion", 0.0, "other", "join", tr.where) for d in joins.pop(k, [])]
            if prev is not None:
                deps.insert(0, RawDep(prev, "completion", delay, "think", "sequence", tr.at("delay")))
                self.b.add(rid, play, where=tr.where, input_length=n_in, output_length=out, delta_of=prev,
                           hash_ids=_text_ids(text, self.bs, rid), deps=deps, session=prefix,
                           model=tr.string("model", ""))
            else:
                if after is not None:
                    deps.insert(0, RawDep(after.source_id, after.on, after.delay + delay, after.kind, after.relation,
                                          after.where))
                kw = dict(delta_of=fork_base) if fork_base is not None else {}
                self.b.add(rid, play, where=tr.where, input_length=n_in, output_length=out,
                           hash_ids=_text_ids(text, self.bs, fork_base or "root"), deps=deps, session=prefix,
                           model=tr.string("model", ""), not_before=delay if after is None else None,
                           agent="main" if len(stack) == 1 else sid, **kw)
            for j, f in enumerate(tr.items("forks")):
                child = f if isinstance(f, str) else tr.child(f, f"forks[{j}].").string("child")
                self.conversation(child, play, self._instance(child),
                                  RawDep(rid, "completion", 0.0, "other", "spawn", tr.at(f"forks[{j}]")), rid, stack)
            for j, s in enumerate(tr.items("spawns")):
                if isinstance(s, str):
                    children, join_at = [s], k + 1
                else:
                    sr = tr.child(s, f"spawns[{j}].")
                    children, join_at = sr.items("children"), sr.integer("join_at", k + 1)
                    if not k < join_at < len(turns):
                        raise sr.fail("join_at", f"a turn index after {k} and below {len(turns)}", join_at)
                for child in children:
                    last = self.conversation(child, play, self._instance(child),
                                             RawDep(rid, "completion", 0.0, "other", "spawn", tr.at(f"spawns[{j}]")),
                                             None, stack)
                    if join_at < len(turns):
                        joins.setdefault(join_at, []).append(last)
            prev = rid
        return prev

    def _instance(self, sid: str) -> str:
        """Ids of one run of a conversation (a second run of a spawned template gets ``#2``)."""
        n = self.instances.get(sid, 0) + 1
        self.instances[sid] = n
        return sid if n == 1 else f"{sid}#{n}"
