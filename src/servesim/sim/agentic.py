"""Runs an :class:`~servesim.workload.agentic.graph.AgenticGraph` through the simulation: play starts, dependency release, failure.

The driver plugs into :class:`servesim.sim.simulation.Simulation` in mode ``"driven"``
through its public API only: it posts ``RELEASE`` events (a play start, or a node whose
dependencies have fired), submits each released node as a request, and listens to terminal
states (completion, rejection) and pass ends (first tokens).

Per play instance (a *run*: a play started once; with recycling the same play runs again
with fresh cache identities) it keeps each node's state, the time each dependency fired,
which constraint released the node (its floor or one dependency: the critical path's
links), the play's in-flight count (peak fan-out) and its end.  A rejected node fails its
play: nodes not yet sent are skipped; requests already sent run to their end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np

from servesim.metrics.recorder import Status
from servesim.sim.events import EventKind
from servesim.workload.request import Request

from servesim.workload.agentic.graph import AgenticGraph, PlayStart

if TYPE_CHECKING:
    from servesim.sim.simulation import Simulation

# Node states within a run.
PENDING, RELEASED, SENT, DONE, SKIPPED = range(5)
#: Release causes: the node's floor (or its play's start, for a root), else a dependency's position.
CAUSE_FLOOR = -1

_COMPLETED = int(Status.COMPLETED)


@dataclass
class Run:
    """One play instance as it ran."""

    index: int
    play: int
    generation: int
    lane: int
    start: float
    warmup: bool
    #: Per node of the play (by position in ``Play.nodes``): state, request index, times.
    state: list[int]
    request: list[int]
    remaining: list[int]
    ready_at: list[float]
    cause: list[int]
    released_at: list[float]
    failed: bool = False
    failed_node: int = -1
    in_flight: int = 0
    peak_fanout: int = 0
    end: float = math.nan
    ended: bool = False
    #: Node position of the play -> position in ``state`` etc. (shared by the play's runs).
    local: dict = field(default_factory=dict)


class AgenticDriver:
    """Releases the nodes of an agentic graph as their dependencies fire."""

    def __init__(self, graph: AgenticGraph, starts: Sequence[PlayStart], *, floors: bool = True,
                 speedup: float = 1.0, lanes: int | None = None, recycle_until: float | None = None,
                 warmup_plays: int = 0) -> None:
        self.graph = graph
        self.floors = floors
        #: The first plays started warm the caches; their requests are warm-up (out of the metrics).
        self.warmup_plays = warmup_plays
        self.scale = 1.0 / speedup
        self.lanes = lanes
        #: With lanes: a freed lane takes the next play (wrapping to fresh copies) until this time.
        self.recycle_until = recycle_until
        self._starts = list(starts)
        self._next_play = len(self._starts)  # the corpus position a freed lane takes next
        self.runs: list[Run] = []
        #: Per request index: its run and node (graph index).
        self.req_run: list[int] = []
        self.req_node: list[int] = []
        self._local = [{n: k for k, n in enumerate(p.nodes)} for p in graph.plays]
        self._watch_first: dict[int, None] = {}
        self._uses_first = any(d.on == "first_token" for n in graph.nodes for d in n.deps)
        self.sim: "Simulation | None" = None
        self.plays_not_started = 0
        self._posted_starts = 0
        #: Per terminal request index: (first token, finish) as the server emitted them.
        self.server_times: dict[int, tuple[float, float]] = {}

    # -- wiring ----------------------------------------------------------------------------
    def attach(self, sim: "Simulation") -> None:
        self.sim = sim
        sim.register(EventKind.RELEASE, self._on_release)
        sim.listen_terminal(self._on_terminal)
        if self._uses_first:
            sim.listen_pass_end(self._on_pass_end)
        for s in self._starts:
            self._post_start(s)

    # -- events ----------------------------------------------------------------------------
    def _on_release(self, payload, now: float) -> None:
        if isinstance(payload, PlayStart):
            self._start_play(payload, now)
            return
        run_index, k = payload
        run = self.runs[run_index]
        if run.state[k] != RELEASED:
            return
        if run.failed:
            run.state[k] = SKIPPED
            self._maybe_end(run, now)
            return
        self._send(run, k, now)

    def _start_play(self, s: PlayStart, now: float) -> None:
        play = self.graph.plays[s.play]
        n = len(play.nodes)
        run = Run(len(self.runs), s.play, s.generation, s.lane, now, len(self.runs) < self.warmup_plays,
                  [PENDING] * n, [-1] * n,
                  [len(self.graph.nodes[i].deps) for i in play.nodes], [-math.inf] * n, [CAUSE_FLOOR] * n,
                  [math.nan] * n, local=self._local[s.play])
        self.runs.append(run)
        for k, i in enumerate(play.nodes):
            if run.remaining[k] == 0:
                self._release(run, k, now)

    def _floor(self, run: Run, k: int) -> float:
        node = self.graph.nodes[self.graph.plays[run.play].nodes[k]]
        if self.floors or not node.deps:
            return run.start + node.not_before * self.scale
        return -math.inf

    def _release(self, run: Run, k: int, now: float) -> None:
        """Every dependency of node ``k`` has fired: post it at the later of them and its floor."""
        floor = self._floor(run, k)
        at = run.ready_at[k]
        if floor > at or not self.graph.nodes[self.graph.plays[run.play].nodes[k]].deps:
            run.cause[k] = CAUSE_FLOOR
            at = floor
        at = max(at, now)
        run.state[k] = RELEASED
        run.released_at[k] = at
        self.sim.post(at, EventKind.RELEASE, (run.index, k))

    def _send(self, run: Run, k: int, now: float) -> None:
        g = self.graph
        i = g.plays[run.play].nodes[k]
        node = g.nodes[i]
        sim = self.sim
        index = sim.rec.size
        ids, out_ids, rid, session = node.hash_ids, node.output_hash_ids, node.node_id, node.session
        if run.generation:
            off = g.id_offset(run.generation)
            ids = tuple(x + off for x in ids)
            out_ids = tuple(x + off for x in out_ids)
            rid, session = f"{rid}#{run.generation}", f"{session}#{run.generation}"
        # A prefill-only node (output 0) runs as one output token: the prefill pass samples it.
        req = Request(index, rid, now, node.input_length, max(node.output_length, 1), ids, g.block_size,
                      session_id=session, turn=node.turn, output_hash_ids=out_ids, warmup=run.warmup)
        self.req_run.append(run.index)
        self.req_node.append(i)
        run.state[k] = SENT
        run.request[k] = index
        run.in_flight += 1
        run.peak_fanout = max(run.peak_fanout, run.in_flight)
        self._fire(run, i, "dispatch", now, now)
        if self._uses_first and any(d.on == "first_token" for j, kk in node.dependents
                                    for d in (g.nodes[j].deps[kk],)):
            self._watch_first[index] = None
        sim.submit(req, now)

    def _fire(self, run: Run, i: int, on: str, t: float, now: float) -> None:
        """Node ``i`` reached ``on`` at ``t``: its dependents' conditions on that event are met."""
        g = self.graph
        local = run.local
        for j, kk in g.nodes[i].dependents:
            dep = g.nodes[j].deps[kk]
            if dep.on != on:
                continue
            k = local[j]
            if run.state[k] != PENDING:
                continue
            at = t + dep.delay * self.scale
            if at > run.ready_at[k]:
                run.ready_at[k] = at
                run.cause[k] = kk
            run.remaining[k] -= 1
            if run.remaining[k] == 0:
                self._release(run, k, now)

    def _on_terminal(self, req: Request, t: float) -> None:
        index = req.index
        run = self.runs[self.req_run[index]]
        i = self.req_node[index]
        k = run.local[i]
        run.state[k] = DONE
        run.in_flight -= 1
        rec = self.sim.rec
        # The server-side token times (a frontend's stream latency shifts the recorded ones
        # after the run); the critical path is walked on these, as the release was.
        self.server_times[index] = (float(rec.column("first_token")[index]), float(rec.column("finish")[index]))
        if rec.column("status")[index] == _COMPLETED:
            if self._watch_first.pop(index, 0) is None:
                ft = rec.column("first_token")[index]
                self._fire(run, i, "first_token", ft if ft == ft else t, t)
            fin = rec.column("finish")[index]  # the pass end it finished at (a stretch may commit later)
            self._fire(run, i, "completion", min(float(fin), t) if fin == fin else t, t)
        else:
            self._watch_first.pop(index, None)
            if not run.failed:
                run.failed = True
                run.failed_node = i
        self._maybe_end(run, t)

    def _on_pass_end(self, worker, now: float) -> None:
        if not self._watch_first:
            return
        first = self.sim.rec.column("first_token")
        fired = [idx for idx in self._watch_first if first[idx] == first[idx]]
        for idx in fired:
            del self._watch_first[idx]
            run = self.runs[self.req_run[idx]]
            self._fire(run, self.req_node[idx], "first_token", float(first[idx]), now)

    def _maybe_end(self, run: Run, t: float) -> None:
        """A play ends when nothing of it is in flight and nothing more can be sent."""
        if run.ended or run.in_flight:
            return
        if run.failed:
            if any(s == RELEASED for s in run.state):
                return  # released nodes are skipped when their event comes
            for k, s in enumerate(run.state):
                if s == PENDING:
                    run.state[k] = SKIPPED
        elif any(s != DONE for s in run.state):
            return
        run.ended = True
        run.end = t
        if self.lanes is not None and run.lane >= 0:
            self._refill_lane(run.lane, t)

    def _refill_lane(self, lane: int, now: float) -> None:
        n = len(self.graph.plays)
        pos = self._next_play
        if self.recycle_until is None:
            if pos >= n:
                return
        elif now > self.recycle_until:
            return
        self._next_play += 1
        self._post_start(PlayStart(now, pos % n, pos // n, lane))

    def _post_start(self, s: PlayStart) -> None:
        self._posted_starts += 1
        self.sim.post(s.time, EventKind.RELEASE, s)

    # -- results ---------------------------------------------------------------------------
    def finish(self, now: float) -> None:
        """After the run: plays still open stay incomplete; unsent nodes of failed plays are skipped."""
        self.plays_not_started = self._posted_starts - len(self.runs)
        for run in self.runs:
            if run.failed:
                for k, s in enumerate(run.state):
                    if s in (PENDING, RELEASED):
                        run.state[k] = SKIPPED

    def request_columns(self, size: int) -> dict[str, np.ndarray | list]:
        """requests.parquet's agentic columns: each request's play run (row of plays.parquet),
        play, agent, dependency ids and what released it (``floor`` or ``<id> <event>``)."""
        g = self.graph
        play, agent, deps, cause, released = [], [], [], [], np.empty(size, dtype=np.float64)
        for r in range(size):
            run = self.runs[self.req_run[r]]
            node = g.nodes[self.req_node[r]]
            k = run.local[self.req_node[r]]
            suffix = f"#{run.generation}" if run.generation else ""
            play.append(g.plays[run.play].play_id + suffix)
            agent.append(node.agent)
            deps.append(",".join(g.nodes[d.source].node_id + suffix for d in node.deps))
            c = run.cause[k]
            cause.append("floor" if c < 0 else f"{g.nodes[node.deps[c].source].node_id}{suffix} {node.deps[c].on}")
            released[r] = run.released_at[k]
        return {"play_run": np.asarray(self.req_run[:size], dtype=np.int64), "play_id": play, "agent": agent,
                "depends_on": deps, "released_by": cause, "release_s": released}


def driver_for(source, seed: int) -> AgenticDriver:
    """The driver of an agentic workload source (``workload/agentic/source.py:AgenticSource``)."""
    load = source.load
    return AgenticDriver(source.graph(), source.starts(seed), floors=load.floors, speedup=source.speedup,
                         lanes=load.lanes if load.arrival == "lanes" else None, recycle_until=load.duration_s,
                         warmup_plays=load.warmup_plays)
