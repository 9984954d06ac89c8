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

AgentX's phases (``workload/agentic/phases.py``; bookkeeping in ``sim/agentic_phases.py``):
with a snapshot, each initial lane's run is prepared at its cut (history nodes are never
sent); warm-up requests (primers, then per-lane requests) run first and are marked warm-up;
at the barrier the prepared runs start, and with a profile the admission window opens:
releases after its cutoff are not issued, the grace deadline cancels what is in flight,
and idle waits are capped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np

from servesim.metrics.recorder import Status
from servesim.sim.events import EventKind
from servesim.workload.request import Request

from servesim.sim.agentic_phases import LaneWarmup, ProfileWindow, Warmup
from servesim.workload.agentic.graph import AgenticGraph, PlayStart
from servesim.workload.agentic.phases import (LANE_WARMUP, PLAY, PRIMER, ProfileOptions, Snapshot, cut_play,
                                              draw_fractions, lane_context, primer_nodes)

if TYPE_CHECKING:
    from servesim.sim.simulation import Simulation

# Node states within a run (HISTORY: before the run's snapshot cut, never sent).
PENDING, RELEASED, SENT, DONE, SKIPPED, HISTORY = range(6)
_PHASE_KIND = {"primer": PRIMER, "warmup": LANE_WARMUP}
#: Release causes: the node's floor (or its play's start, for a root), else a dependency's position.
CAUSE_FLOOR = -1

_COMPLETED = int(Status.COMPLETED)


@dataclass(frozen=True)
class _Phase:
    """A phase event on the clock: ``warmup`` (the phases begin), ``cutoff`` or ``grace``."""

    name: str


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
    #: The snapshot cut (s of the run's clock, after speedup): floors count from ``start - offset``.
    offset: float = 0.0
    #: Nodes before the cut (never sent).
    history: int = 0
    #: The snapshot cut (s after the play's start, after speedup); NaN: the run starts at its beginning.
    snapshot_cut: float = math.nan
    #: Node position of the play -> position in ``state`` etc. (shared by the play's runs).
    local: dict = field(default_factory=dict)
    #: The nodes before this position are done or history, both final states: the end-of-play
    #: check (:meth:`AgenticDriver._maybe_end`) resumes its scan here instead of at the start.
    closed: int = 0


class AgenticDriver:
    """Releases the nodes of an agentic graph as their dependencies fire."""

    def __init__(self, graph: AgenticGraph, starts: Sequence[PlayStart], *, floors: bool = True,
                 speedup: float = 1.0, lanes: int | None = None, recycle_until: float | None = None,
                 warmup_plays: int = 0, snapshot_fractions: Sequence[float] | None = None,
                 warmup: tuple[bool, int] | None = None, profile: ProfileOptions | None = None) -> None:
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
        #: Whether any dependency fires on its source's dispatch (else a send releases nothing).
        self._uses_dispatch = any(d.on == "dispatch" for n in graph.nodes for d in n.deps)
        self.sim: "Simulation | None" = None
        self.plays_not_started = 0
        self._posted_starts = 0
        #: Per terminal request index: (first token, finish) as the server emitted them.
        self.server_times: dict[int, tuple[float, float]] = {}
        #: Per request index: PLAY, PRIMER or LANE_WARMUP.
        self.req_phase: list[int] = []
        #: AgentX phases: per initial lane its cut fraction; (primers?, requests per lane); the profile.
        self.snapshot_fractions = list(snapshot_fractions) if snapshot_fractions is not None else None
        self.warmup_options = warmup
        self.profile_options = profile
        self.phased = snapshot_fractions is not None or warmup is not None or profile is not None
        self.warmup: Warmup | None = None
        self.window: ProfileWindow | None = None
        #: When measurement starts (the barrier; 0 without a warm-up); None before it.
        self.measure_start: float | None = None if self.phased else 0.0
        self._prepared: list[Run] = []
        #: Play requests in flight (sent, not terminal), and play starts posted but not handled.
        self._open: dict[int, None] = {}
        self._pending_starts = 0

    # -- wiring ----------------------------------------------------------------------------
    def attach(self, sim: "Simulation") -> None:
        self.sim = sim
        sim.register(EventKind.RELEASE, self._on_release)
        sim.listen_terminal(self._on_terminal)
        if self._uses_first:
            sim.listen_pass_end(self._on_pass_end)
        if self.phased:
            sim.post(0.0, EventKind.RELEASE, _Phase("warmup"))
            return
        for s in self._starts:
            self._post_start(s)

    # -- events ----------------------------------------------------------------------------
    def _on_release(self, payload, now: float) -> None:
        if isinstance(payload, PlayStart):
            self._pending_starts -= 1
            self._start_play(payload, now)
        elif isinstance(payload, _Phase):
            self._on_phase(payload.name, now)
        else:
            self._release_due(*payload, now)
        self._check_client_idle(now)

    def _release_due(self, run_index: int, k: int, now: float) -> None:
        run = self.runs[run_index]
        if run.state[k] != RELEASED or run.released_at[k] != now:
            return  # sent already, or moved earlier by the client-idle cap
        if run.failed:
            run.state[k] = SKIPPED
            self._maybe_end(run, now)
            return
        self._send(run, k, now)

    def _start_play(self, s: PlayStart, now: float) -> None:
        self._begin(self._new_run(s, now), now)

    def _new_run(self, s: PlayStart, now: float, snap: Snapshot | None = None) -> Run:
        """A run of play ``s.play`` (joined at its snapshot cut ``snap``), not started yet."""
        play = self.graph.plays[s.play]
        n = len(play.nodes)
        nodes = self.graph.nodes
        history = snap.history if snap is not None else frozenset()
        run = Run(len(self.runs), s.play, s.generation, s.lane, now, len(self.runs) < self.warmup_plays,
                  [HISTORY if i in history else PENDING for i in play.nodes], [-1] * n,
                  [sum(1 for d in nodes[i].deps if d.source not in history) for i in play.nodes],
                  [-math.inf] * n, [CAUSE_FLOOR] * n, [math.nan] * n, local=self._local[s.play],
                  offset=snap.cut * self.scale if snap is not None else 0.0, history=len(history),
                  snapshot_cut=snap.cut * self.scale if snap is not None else math.nan)
        self.runs.append(run)
        return run

    def _begin(self, run: Run, now: float) -> None:
        """Start ``run`` at ``now``: its nodes with nothing left to wait for are released (a
        dependency on a history node fired before the cut: it counts as firing now)."""
        run.start = now
        for k, i in enumerate(self.graph.plays[run.play].nodes):
            if run.state[k] == PENDING and run.remaining[k] == 0:
                run.ready_at[k] = now if self.graph.nodes[i].deps else -math.inf
                self._release(run, k, now)

    def _floor(self, run: Run, k: int) -> float:
        node = self.graph.nodes[self.graph.plays[run.play].nodes[k]]
        if self.floors or not node.deps:
            return run.start - run.offset + node.not_before * self.scale
        return -math.inf

    def _release(self, run: Run, k: int, now: float) -> None:
        """Every dependency of node ``k`` has fired: post it at the later of them and its floor."""
        floor = self._floor(run, k)
        at = run.ready_at[k]
        if floor > at or not self.graph.nodes[self.graph.plays[run.play].nodes[k]].deps:
            run.cause[k] = CAUSE_FLOOR
            at = floor
        at = max(at, now)
        window = self.window
        if window is not None:
            at = window.cap_play_wait(at, now)
            if not window.admits(at):
                window.not_issued += 1
                return  # after the admission cutoff: never issued (the node stays unsent)
            window.posted(at, run.index, k)
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
        self.req_phase.append(PLAY)
        self._open[index] = None
        run.state[k] = SENT
        run.request[k] = index
        run.in_flight += 1
        run.peak_fanout = max(run.peak_fanout, run.in_flight)
        if self._uses_dispatch:
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
        if self.req_phase[index] != PLAY:
            rec = self.sim.rec
            self.server_times[index] = (float(rec.column("first_token")[index]), float(rec.column("finish")[index]))
            self._warmup_ended(index, t)
            return
        self._open.pop(index, None)
        self._play_request_ended(req, t)
        self._check_client_idle(t)

    def _play_request_ended(self, req: Request, t: float) -> None:
        index = req.index
        run = self.runs[self.req_run[index]]
        i = self.req_node[index]
        k = run.local[i]
        run.state[k] = DONE
        run.in_flight -= 1
        rec = self.sim.rec
        # The server-side token times (a frontend's stream latency shifts the recorded ones
        # after the run); the critical path is walked on these, as the release was.
        ft, fin = float(rec.column("first_token")[index]), float(rec.column("finish")[index])
        self.server_times[index] = (ft, fin)
        if rec.column("status")[index] == _COMPLETED:
            if self._watch_first.pop(index, 0) is None:
                self._fire(run, i, "first_token", ft if ft == ft else t, t)
            # ``fin``: the pass end it finished at (a stretch may commit later)
            self._fire(run, i, "completion", min(fin, t) if fin == fin else t, t)
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
        elif not _all_closed(run):
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
        self._pending_starts += 1
        self.sim.post(s.time, EventKind.RELEASE, s)

    # -- AgentX phases ---------------------------------------------------------------------
    def _on_phase(self, name: str, now: float) -> None:
        if name == "warmup":
            self._prepare(now)
        elif name == "cutoff":
            if self._open:  # responses get the grace; then what is left is cancelled
                self.sim.post(self.window.grace_deadline, EventKind.RELEASE, _Phase("grace"))
        elif name == "grace":
            self._cancel_in_flight(now)

    def _prepare(self, now: float) -> None:
        """Prepare the initial lanes' runs (at their cuts), then warm up or start measuring."""
        fractions = self.snapshot_fractions
        primers: list[tuple[int, int]] = []
        lanes: list[LaneWarmup] = []
        for n, s in enumerate(self._starts):
            snap = cut_play(self.graph, s.play, fractions[n]) if fractions is not None else None
            run = self._new_run(s, now, snap)
            self._prepared.append(run)
            if snap is not None and self.warmup_options is not None:
                with_primers, per_lane = self.warmup_options
                mine = primer_nodes(self.graph, s.play, snap.history)
                if with_primers:
                    primers += [(run.index, i) for i in mine]
                context = lane_context(self.graph, mine)
                if context is not None and per_lane:
                    lanes.append(LaneWarmup(run.index, context, per_lane))
        self._posted_starts += len(self._starts)
        if self.warmup_options is None:
            self._measure(now)
            return
        self.warmup = Warmup(primers, lanes)
        self._send_warmups(self.warmup.first(), now)
        if self.warmup.settled:
            self._measure(now)

    def _send_warmups(self, todo: list[tuple[str, int, int]], now: float) -> None:
        for kind, _, _ in todo:  # counted in flight first: one may end (a rejection) as it is sent
            self.warmup.sent(kind)
        for kind, run_index, i in todo:
            self._send_copy(kind, self.runs[run_index], i, now)

    def _send_copy(self, kind: str, run: Run, i: int, now: float) -> None:
        """A warm-up request: node ``i``'s prompt (the run's cache identities), one output token."""
        g = self.graph
        node = g.nodes[i]
        sim = self.sim
        index = sim.rec.size
        off = g.id_offset(run.generation) if run.generation else 0
        ids = tuple(x + off for x in node.hash_ids) if off else node.hash_ids
        suffix = f"#{run.generation}" if run.generation else ""
        req = Request(index, f"{node.node_id}{suffix}@{kind}{index}", now, node.input_length, 1, ids, g.block_size,
                      session_id=node.session + suffix, turn=node.turn, warmup=True)
        self.req_run.append(run.index)
        self.req_node.append(i)
        self.req_phase.append(_PHASE_KIND[kind])
        sim.submit(req, now)

    def _warmup_ended(self, index: int, t: float) -> None:
        kind = "primer" if self.req_phase[index] == PRIMER else "warmup"
        self._send_warmups(self.warmup.ended(kind, self.req_run[index]), t)
        if self.warmup.settled:
            self._measure(t)

    def _measure(self, now: float) -> None:
        """The barrier: measurement starts; the prepared runs begin; the profile's window opens."""
        if self.measure_start is not None:
            return  # (a barrier reached inside a warm-up request's send)
        self.measure_start = now
        if self.profile_options is not None:
            self.window = ProfileWindow(self.profile_options, now)
            self.recycle_until = self.window.cutoff
            self.sim.post(self.window.cutoff, EventKind.RELEASE, _Phase("cutoff"))
        for run in self._prepared:
            self._begin(run, now)
        for run in self._prepared:
            self._maybe_end(run, now)  # a run whose every node is history ends at once

    def _cancel_in_flight(self, now: float) -> None:
        """The grace deadline: the client cancels its requests still in flight."""
        window = self.window
        window.drain_deadline = now + window.options.drain_s
        for index in list(self._open):
            window.cancelled.append(index)
            self.sim.abort(index, now, "cancelled at the profile's grace deadline")

    def _check_client_idle(self, now: float) -> None:
        """Nothing in flight anywhere: the next release comes at most ``client_idle_cap_s`` later."""
        window = self.window
        if window is None:
            return
        runs = self.runs

        def live(at: float, r: int, k: int) -> bool:
            return runs[r].state[k] == RELEASED and runs[r].released_at[k] == at

        if self._open or self._pending_starts or now > window.cutoff:
            window.prune(live)
            return
        for _old, r, k in window.earliest_to_pull(now, live):
            at = now + window.options.client_idle_cap_s
            runs[r].released_at[k] = at
            window.posted(at, r, k)
            self.sim.post(at, EventKind.RELEASE, (r, k))

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
        play, agent, dependency ids and what released it (``floor`` or ``<id> <event>``; a warm-up
        copy of a node's prompt: ``primer`` or ``warmup``)."""
        g = self.graph
        play, agent, deps, cause, released = [], [], [], [], np.empty(size, dtype=np.float64)
        arrival = self.sim.rec.column("arrival")
        for r in range(size):
            run = self.runs[self.req_run[r]]
            node = g.nodes[self.req_node[r]]
            k = run.local[self.req_node[r]]
            suffix = f"#{run.generation}" if run.generation else ""
            play.append(g.plays[run.play].play_id + suffix)
            agent.append(node.agent)
            if self.req_phase[r] != PLAY:  # a warm-up copy of the node's prompt, sent by the warm-up
                deps.append("")
                cause.append("primer" if self.req_phase[r] == PRIMER else "warmup")
                released[r] = arrival[r]
                continue
            deps.append(",".join(g.nodes[d.source].node_id + suffix for d in node.deps))
            c = run.cause[k]
            cause.append("floor" if c < 0 else f"{g.nodes[node.deps[c].source].node_id}{suffix} {node.deps[c].on}")
            released[r] = run.released_at[k]
        return {"play_run": np.asarray(self.req_run[:size], dtype=np.int64), "play_id": play, "agent": agent,
                "depends_on": deps, "released_by": cause, "release_s": released}


def driver_for(source, seed: int) -> AgenticDriver:
    """The driver of an agentic workload source (``workload/agentic/source.py:AgenticSource``)."""
    load = source.load
    starts = source.starts(seed)
    fractions = draw_fractions(load.snapshot, len(starts), seed) if load.snapshot is not None else None
    warmup = (load.warmup.primers, load.warmup.requests_per_lane) if load.warmup is not None else None
    return AgenticDriver(source.graph(), starts, floors=load.floors, speedup=source.speedup,
                         lanes=load.lanes if load.arrival == "lanes" else None, recycle_until=load.duration_s,
                         warmup_plays=load.warmup_plays, snapshot_fractions=fractions, warmup=warmup,
                         profile=load.profile)


def _all_closed(run: Run) -> bool:
    """Whether every node of the run is done or history.  Both states are final, so the scan
    resumes where the last one stopped (``run.closed``): a play's checks cost its length once,
    not once per request that ends with nothing else in flight."""
    state, k, n = run.state, run.closed, len(run.state)
    while k < n and (state[k] == DONE or state[k] == HISTORY):
        k += 1
    run.closed = k
    return k == n
