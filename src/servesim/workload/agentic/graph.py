"""The one internal representation of agentic workloads: a DAG of request nodes grouped in plays.

Every agentic trace format lowers into an :class:`AgenticGraph` through a
:class:`GraphBuilder`, which checks what the readers cannot check row by row (unknown
dependency ids, cycles, dependencies across plays, a delta on a missing node) and resolves
prompts:

- a *full* prompt lists its blocks' ``hash_ids``;
- a *delta* prompt is another node's prompt, then that node's output, then new blocks. The
  base node gets ids for its generated blocks (``output_hash_ids``), so a later request that
  carries the answer reuses its KV.

Raw ids are interned into dense non-negative ints (per play when the trace's ids are
play-local), so a recycled copy of a play gets fresh cache identities by an offset
(:meth:`AgenticGraph.id_offset`).

Release rule (the driver, ``driver.py``, applies it): a node is released at the later of
its floor (``play start + not_before``; roots always, other nodes when floors are on) and,
for every dependency, the moment the source is dispatched, emits its first token or
completes (``on``) plus the dependency's ``delay``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from servesim.errors import WorkloadError

from .trace_ids import id_array, rank_ids, shared_ids

TRIGGERS = ("dispatch", "first_token", "completion")
DEP_KINDS = ("tool", "think", "other")
RELATIONS = ("sequence", "spawn", "join", "barrier")


@dataclass(frozen=True, slots=True)
class Dependency:
    """A release condition of a node: ``source`` (a node index) reached ``on``, plus ``delay`` s."""

    source: int
    on: str = "completion"
    delay: float = 0.0
    kind: str = "other"
    relation: str = "sequence"


@dataclass(slots=True)
class Node:
    """One LLM call of a play (its prompt fully resolved)."""

    node_id: str
    play: int
    session: str
    agent: str
    model: str
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]
    deps: tuple[Dependency, ...]
    #: Floor: seconds after the play start before which the node is never released.
    not_before: float
    #: Ids of the blocks its answer fills (set when another node's prompt carries the answer).
    output_hash_ids: tuple[int, ...] = ()
    #: Position in its session (0 = first turn, cold cache).
    turn: int = 0
    #: Nodes that depend on this one, with the dependency's position in their ``deps``.
    dependents: list = field(default_factory=list)


@dataclass(slots=True)
class Play:
    """One agent run: its nodes in topological order and its recorded start (seconds)."""

    play_id: str
    start: float
    nodes: list[int]
    #: Recorded makespan (s) where the trace has one (for slowdown), else None.
    recorded_makespan: float | None = None


@dataclass
class PlayStart:
    """When a play (``play`` of the graph, copy ``generation``) starts, on which lane (-1: none)."""

    time: float
    play: int
    generation: int = 0
    lane: int = -1


@dataclass
class AgenticGraph:
    """Every node and play of an agentic workload."""

    nodes: list[Node]
    plays: list[Play]
    block_size: int
    #: One line for reports, e.g. "agentic_mooncake v2 trace.jsonl: 3 plays, 40 nodes".
    description: str
    #: Number of distinct block ids (ids are 0 .. n_ids - 1).
    n_ids: int

    def id_offset(self, generation: int) -> int:
        """What a recycled copy (``generation`` > 0) adds to every block id: fresh identities."""
        return generation * self.n_ids


# ---------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------
@dataclass(slots=True)
class RawDep:
    """A dependency as read: the source's id, and where it was written (for messages)."""

    source_id: str
    on: str
    delay: float
    kind: str
    relation: str
    where: str


@dataclass(slots=True)
class _RawNode:
    node_id: str
    play_id: str
    session: str
    agent: str
    model: str
    input_length: int
    output_length: int
    hash_ids: Sequence[int] | None
    delta_of: str | None
    deps: list[RawDep]
    not_before: float | None
    where: str
    recorded_start: float | None
    recorded_end: float | None
    private_tail: bool = False


class GraphBuilder:
    """Collects nodes from a reader, then :meth:`build` checks and resolves the graph.

    ``local_ids``: the trace's hash ids are scoped to a play (equal ids in two plays are not
    the same content); otherwise they are global.
    """

    def __init__(self, source: str, block_size: int, local_ids: bool = False) -> None:
        self.source = source
        self.block_size = block_size
        self.local_ids = local_ids
        self._raw: list[_RawNode] = []
        self._by_id: dict[str, int] = {}
        self._play_order: dict[str, int] = {}
        self._play_start: dict[str, float] = {}
        self._recorded: dict[str, float] = {}

    def add(self, node_id: str, play_id: str, *, where: str, input_length: int, output_length: int,
            hash_ids: Sequence[int] | None = None, delta_of: str | None = None, deps: Sequence[RawDep] = (),
            not_before: float | None = None, session: str | None = None, agent: str = "main",
            model: str = "", recorded_start: float | None = None, recorded_end: float | None = None,
            id_field: str = "request_id", private_tail: bool = False) -> None:
        """One node; ``not_before`` and the recorded times are seconds from the trace's zero.

        ``not_before`` of a node is its recorded start; the play's start is its earliest
        node's, and floors are kept relative to it.  ``private_tail``: a partly filled last
        block is this request's alone (its id matches no other request's)."""
        if node_id in self._by_id:
            first = self._raw[self._by_id[node_id]].where
            raise WorkloadError(f"{where}: {id_field} '{node_id}' repeats the node of {first}; ids must be unique")
        self._by_id[node_id] = len(self._raw)
        self._play_order.setdefault(play_id, len(self._play_order))
        self._raw.append(_RawNode(node_id, play_id, session if session is not None else play_id, agent, model,
                                  input_length, output_length, hash_ids, delta_of, list(deps), not_before, where,
                                  recorded_start, recorded_end, private_tail))

    def add_dependency(self, node_id: str, dep: RawDep) -> None:
        """One more dependency of a node already added (a join found after the node was read)."""
        self._raw[self._by_id[node_id]].deps.append(dep)

    def set_play_start(self, play_id: str, start: float) -> None:
        """The play's recorded start (s), when the format states it apart from its nodes."""
        self._play_start[play_id] = start

    def set_recorded_makespan(self, play_id: str, seconds: float) -> None:
        self._recorded[play_id] = seconds

    def __len__(self) -> int:
        return len(self._raw)

    # -- build -----------------------------------------------------------------------------
    def build(self) -> AgenticGraph:
        raw = self._raw
        if not raw:
            raise WorkloadError(f"{self.source}: no requests in the trace")
        play_index = self._play_order
        deps = self._resolve_deps()
        order = self._topological(deps)
        ids = _Interner(self._raw, self._play_order if self.local_ids else None)
        nodes: list[Node | None] = [None] * len(raw)
        for i in order:
            nodes[i] = self._node(i, deps[i], nodes, ids)
        ids.positions = []  # read by _full_prompt alone: let the arrays go
        plays = self._plays(nodes, order)  # type: ignore[arg-type]
        for p, play in enumerate(plays):
            assert play_index[play.play_id] == p
        out = [n for n in nodes if n is not None]
        for i, node in enumerate(out):
            for k, dep in enumerate(node.deps):
                out[dep.source].dependents.append((i, k))
        _number_turns(out, plays)
        desc = f"{self.source}: {len(plays)} plays, {len(out)} requests"
        return AgenticGraph(out, plays, self.block_size, desc, ids.size)

    def _resolve_deps(self) -> list[list[Dependency]]:
        by_id = self._by_id
        out = []
        for i, r in enumerate(self._raw):
            mine = []
            for d in r.deps:
                src = by_id.get(d.source_id)
                if src is None:
                    raise WorkloadError(f"{d.where}: unknown request id '{d.source_id}' (no node has it)")
                if src == i:
                    raise WorkloadError(f"{d.where}: request '{r.node_id}' depends on itself")
                if self._raw[src].play_id != r.play_id:
                    raise WorkloadError(f"{d.where}: request '{r.node_id}' (play '{r.play_id}') depends on "
                                        f"'{d.source_id}' of another play ('{self._raw[src].play_id}')")
                mine.append(Dependency(src, d.on, d.delay, d.kind, d.relation))
            if r.delta_of is not None:
                if r.delta_of not in by_id:
                    raise WorkloadError(f"{r.where}: the prompt extends request '{r.delta_of}', which is not "
                                        "in the trace")
                if self._raw[by_id[r.delta_of]].play_id != r.play_id:
                    raise WorkloadError(f"{r.where}: the prompt extends request '{r.delta_of}' of another play")
            out.append(mine)
        return out

    def _topological(self, deps: list[list[Dependency]]) -> list[int]:
        """Node positions with every dependency and delta base first; a cycle is an error."""
        raw = self._raw
        n = len(raw)
        preds: list[list[int]] = [[d.source for d in deps[i]] for i in range(n)]
        for i, r in enumerate(raw):
            if r.delta_of is not None:
                preds[i].append(self._by_id[r.delta_of])
        indeg = [len(set(p)) for p in preds]
        succ: list[list[int]] = [[] for _ in range(n)]
        for i, p in enumerate(preds):
            for s in set(p):
                succ[s].append(i)
        ready = [i for i in range(n) if indeg[i] == 0]
        ready.reverse()
        order = []
        while ready:  # file order among ready nodes: a stack fed in reverse
            i = ready.pop()
            order.append(i)
            fresh = []
            for j in succ[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    fresh.append(j)
            ready.extend(sorted(fresh, reverse=True))
        if len(order) < n:
            stuck = min(i for i in range(n) if indeg[i] > 0)
            cycle = _find_cycle(stuck, preds, indeg)
            names = " -> ".join(f"'{raw[c].node_id}'" for c in cycle)
            raise WorkloadError(f"{raw[cycle[0]].where}: dependency cycle {names}")
        return order

    def _node(self, i: int, deps: list[Dependency], nodes: list, ids: "_Interner") -> Node:
        r = self._raw[i]
        bs = self.block_size
        scope = r.play_id if self.local_ids else None
        if r.delta_of is None:
            hash_ids = _full_prompt(r, ids.positions[i], bs, ids)
        else:
            base = nodes[self._by_id[r.delta_of]]
            hash_ids = _delta_prompt(r, base, self._by_id[r.delta_of], bs, scope, ids)
            r.input_length = base.input_length + base.output_length + r.input_length
        return Node(r.node_id, self._play_order[r.play_id], r.session, r.agent, r.model, r.input_length,
                    r.output_length, hash_ids, tuple(deps), 0.0 if r.not_before is None else r.not_before)

    def _plays(self, nodes: list[Node], order: list[int]) -> list[Play]:
        plays = [Play(pid, 0.0, []) for pid in self._play_order]
        for i in order:
            plays[nodes[i].play].nodes.append(i)
        for play in plays:
            starts = [self._raw[i].recorded_start for i in play.nodes if self._raw[i].recorded_start is not None]
            floors = [nodes[i].not_before for i in play.nodes]
            start = self._play_start.get(play.play_id, min(starts) if starts else min(floors))
            play.start = start
            for i in play.nodes:  # floors relative to the play's start
                nodes[i].not_before = max(0.0, nodes[i].not_before - start)
            ends = [self._raw[i].recorded_end for i in play.nodes if self._raw[i].recorded_end is not None]
            if play.play_id in self._recorded:
                play.recorded_makespan = self._recorded[play.play_id]
            elif ends and starts and len(ends) == len(play.nodes):
                play.recorded_makespan = max(ends) - min(starts)
        return plays


class _Interner:
    """Raw ids (per scope: a play, or the whole trace) to dense ints; :meth:`fresh` gives ids
    that match nothing.

    Every raw id the trace lists is interned up front, scope by scope (sorted distinct ids, so
    the numbering is deterministic), and each node's ids are turned into their dense positions
    there, a few linear passes per scope (``trace_ids.rank_ids``), through a table indexed by id
    where the ids are small enough.  Ids keyed otherwise (a shifted delta's) go through a dict.
    """

    def __init__(self, raw: list, play_order: dict[str, int] | None) -> None:
        groups: dict[object, list[int]] = {}
        arrays: list[np.ndarray | None] = [None] * len(raw)
        for i, r in enumerate(raw):
            if r.hash_ids is not None and len(r.hash_ids):
                arrays[i] = id_array(r.hash_ids)
                groups.setdefault(r.play_id if play_order is not None else None, []).append(i)
        #: Each node's raw ids as dense positions (an int64 array, by the node's place in
        #: ``raw``; None: it names no ids).
        self.positions: list[np.ndarray | None] = [None] * len(raw)
        self._scopes: dict[object, np.ndarray] = {}
        self._base: dict[object, int] = {}
        self.size = 0
        keys = sorted(groups, key=lambda k: play_order[k]) if play_order is not None else list(groups)
        dense = _DENSE_RANGE * sum(a.size for a in arrays if a is not None) + 1024
        table = None
        for key in keys:
            members = groups[key]
            flat = np.concatenate([arrays[i] for i in members])
            table = _rank_table(table, int(flat.max()), dense)
            uniq, pos = rank_ids(flat, table)
            pos += self.size
            at = 0
            for i in members:
                n = len(arrays[i])  # type: ignore[arg-type]
                self.positions[i] = pos[at:at + n]
                at += n
            self._scopes[key], self._base[key] = uniq, self.size
            self.size += int(uniq.size)
        self._map: dict = {}
        #: One int object per interned id, shared by every prompt that lists it (a long prompt
        #: re-listed by many requests would otherwise hold its own copies: 28 bytes an id).
        self._ints = list(range(self.size))

    def lookup(self, scope, raw_ids: "Sequence[int] | np.ndarray") -> tuple[int, ...]:
        """The dense ids of raw ids of ``scope`` (all were interned up front), as shared ints."""
        if not len(raw_ids):
            return ()
        uniq = self._scopes[scope]
        pos = uniq.searchsorted(np.asarray(raw_ids, dtype=np.uint64)) + self._base[scope]
        return shared_ids(self._ints, pos)

    def get(self, key) -> int:
        v = self._map.get(key)
        if v is None:
            v = self._map[key] = self.size
            self.size += 1
        return v

    def fresh(self) -> int:
        self.size += 1
        return self.size - 1


#: Ids below this many times the number listed are ranked through a table (:func:`_rank_table`).
_DENSE_RANGE = 4


def _rank_table(table: np.ndarray | None, top: int, dense: int) -> np.ndarray | None:
    """The scratch table indexed by id that ``trace_ids.rank_ids`` uses for ids up to ``top``: ``table``
    itself or a larger one, where ``top`` is below ``dense`` (a few times the number of ids
    the trace lists: its own numbering); None otherwise (ids spread over 64 bits)."""
    if top >= dense:
        return None
    if table is None or table.size <= top:
        return np.empty(max(top + 1, 2 * table.size if table is not None else 0), dtype=np.int64)
    return table


def _full_prompt(r: _RawNode, pos: np.ndarray | None, bs: int, ids: _Interner) -> tuple[int, ...]:
    """The node's dense ids: its listed ids (``pos``, their positions), then fresh ids for
    blocks the trace did not name or that are the request's own."""
    need = -(-r.input_length // bs)
    named = shared_ids(ids._ints, pos[:need]) if pos is not None else ()
    private = r.private_tail and r.input_length % bs and need > 0
    if len(named) == need and not private:
        return named
    out = list(named)
    while len(out) < need:  # blocks the trace did not name: content of this request alone
        out.append(ids.fresh())
    if private:
        out[-1] = ids.fresh()
    return tuple(out)


def _delta_prompt(r: _RawNode, base: Node, base_index: int, bs: int, scope, ids: _Interner) -> tuple[int, ...]:
    """Base prompt + base output + the delta's blocks, on one block grid.

    Blocks wholly inside the base's prompt and answer keep the base's ids (the answer's get
    ids here, stored on the base as ``output_hash_ids``); a block that mixes the answer's
    tail and the delta's head, and the delta's blocks after it when they are not aligned to
    the grid, get ids keyed by the base and the delta's raw ids (equal deltas on the same
    base share them)."""
    prior = base.input_length + base.output_length
    n_prompt_blocks = len(base.hash_ids)
    n_full = prior // bs  # blocks filled by the base's prompt and answer
    need_out = max(0, n_full - n_prompt_blocks)
    if len(base.output_hash_ids) < need_out:
        base.output_hash_ids = base.output_hash_ids + tuple(
            ids.fresh() for _ in range(need_out - len(base.output_hash_ids)))
    seq = list(base.hash_ids[:n_full]) + list(base.output_hash_ids[:need_out])
    total = prior + r.input_length
    need = -(-total // bs)
    raw_ids = [] if r.hash_ids is None else r.hash_ids.tolist() if isinstance(r.hash_ids, np.ndarray) \
        else list(r.hash_ids)
    aligned = prior % bs == 0
    k = 0
    while len(seq) < need:
        x = raw_ids[k] if k < len(raw_ids) else None
        if x is None:
            seq.append(ids.fresh())
        elif aligned:
            seq.append(ids.lookup(scope, [x])[0])
        else:
            seq.append(ids.get(("delta", base_index, k, x)))
        k += 1
    return tuple(seq)


def _find_cycle(start: int, preds: list[list[int]], indeg: list[int]) -> list[int]:
    """A cycle among the nodes left with unmet predecessors, walking predecessors from ``start``."""
    seen: dict[int, int] = {}
    path = []
    i = start
    while i not in seen:
        seen[i] = len(path)
        path.append(i)
        i = next(p for p in preds[i] if indeg[p] > 0)
    cycle = path[seen[i]:]
    cycle.reverse()  # in dependency order: each depends on the one before
    return cycle + [cycle[0]]


def _number_turns(nodes: list[Node], plays: list[Play]) -> None:
    """Each node's position in its session, in the play's topological order."""
    for play in plays:
        count: dict[str, int] = {}
        for i in play.nodes:
            s = nodes[i].session
            nodes[i].turn = count.get(s, 0)
            count[s] = nodes[i].turn + 1
