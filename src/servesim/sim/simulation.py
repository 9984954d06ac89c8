"""The simulation loop: arrivals, routing, passes and terminal states on one virtual clock.

Event kinds, in the order they are handled when they share a time stamp:

1. ``PASS_END``: a worker's pass (or decode stretch) ends; its tokens and finished
   requests become visible.
2. ``ARRIVAL``: a request reaches the deployment and is routed to a worker.

With a ``frontend`` (:class:`servesim.perf.frontend.Frontend`), a request the client sends
at ``t`` first crosses the API server: it reaches the router at ``frontend.admit_time(req, t)``
(a second ``ARRIVAL`` event), while its recorded arrival stays ``t``, so TTFT includes the
tokenizer queue.

After all events of one time stamp are handled, idle workers with work start a pass.
Requests are pulled from the workload source lazily (one open-loop arrival ahead, or as
closed-loop slots free up), so traces stream.

The public API for code that drives the loop from outside (disaggregation's KV hand-off, the
agentic workload's release of dependent requests): :meth:`Simulation.post` puts an event on
the clock, :meth:`Simulation.register` names the handler of an event kind
(:class:`servesim.sim.events.EventKind`), :meth:`Simulation.deliver` hands a request to a
worker's engine, :meth:`Simulation.submit` sends a new request through the router, and
:meth:`Simulation.listen_terminal` / :meth:`Simulation.listen_pass_end` are told of terminal
requests and of pass ends.  In mode ``"driven"`` the loop reads no source: everything
arrives through :meth:`submit` from such a driver.
"""

from __future__ import annotations

import math
import time as wallclock
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from servesim.cluster.routers import Router
from servesim.cluster.worker import Worker
from servesim.metrics.recorder import RequestRecorder, Status
from servesim.metrics.timeseries import TimeSeries
from servesim.sim.events import PRIORITY, EventKind, new_event_queue
from servesim.workload.request import Request

if TYPE_CHECKING:
    from servesim.perf.frontend import Frontend

PASS_END = int(EventKind.PASS_END)
ARRIVAL = int(EventKind.ARRIVAL)


@dataclass
class RunStats:
    """What the loop itself observed (not per request)."""

    sim_end: float = 0.0
    wall_seconds: float = 0.0
    events: int = 0
    late_session_turns: int = 0
    stopped_early: bool = False
    notes: list[str] = field(default_factory=list)
    #: The workers as they ended the run (filled in by the caller that built them).
    workers: list = field(default_factory=list)
    #: KV events collected for kv_events.jsonl (when output.kv_events is on).
    kv_events: object = None
    #: The agentic driver (sim/agentic.py) of an agentic workload: its plays as they ran.
    agentic: object = None


class Simulation:
    """Replays one workload through a fleet of workers."""

    def __init__(
        self,
        requests: Iterator[Request],
        mode: str,
        concurrency: int | None,
        workers: Sequence[Worker],
        router: Router,
        recorder: RequestRecorder,
        timeseries: TimeSeries | None = None,
        max_sim_time: float | None = None,
        progress: Callable[[int, float], None] | None = None,
        frontend: "Frontend | None" = None,
        disagg=None,
        in_flight=None,
    ) -> None:
        #: Told which requests are in the system (``activate``/``deactivate`` of their
        #: blocks): the ``belady`` eviction oracle, which must not evict a queued request's prefix.
        self.in_flight = in_flight
        #: Disaggregated prefill/decode (cluster/disagg.py DisaggCoordinator), or None.
        self.disagg = disagg
        self.source = requests
        self.mode = mode
        self.concurrency = concurrency
        self.workers = list(workers)
        self.router = router
        for worker in self.workers:
            worker.settle_on_input = worker.settle_on_input or router.reads_state
            worker.timeseries = timeseries
        self.rec = recorder
        self.ts = timeseries
        self.max_sim_time = max_sim_time if max_sim_time is not None else math.inf
        self.progress = progress
        self.events = new_event_queue()
        self.stats = RunStats()
        self._exhausted = False
        self._lookahead: Request | None = None
        # Sessions: later turns wait for their previous turn to end.
        self._waiting_turns: dict[int, Request] = {}
        self._ended: dict[int, float] = {}
        # Closed loop.
        self._in_flight = 0
        self._warmups_left = 0
        self._held: Request | None = None
        self._dirty: set[int] = set()
        self._terminated = 0
        # Frontend: requests sent by the client and not yet through the API server.
        self.frontend = frontend
        self._sent: dict[int, float] = {}
        #: Handlers of the event kinds the loop does not handle itself, by kind.
        self._handlers: dict[int, Callable] = {}
        #: Called with ``(request, time)`` as each request reaches its terminal state.
        self._terminal_listener: Callable | None = None
        #: Called with ``(worker, time)`` after each pass end's tokens are committed.
        self._pass_listener: Callable | None = None
        #: Aborts waiting for the pass in flight on a worker to end, by worker id: (index, reason).
        self._aborts: dict[int, list] = {}
        #: Aborts of requests still crossing the frontend, by index: the reason.
        self._abort_on_arrival: dict[int, str] = {}
        if disagg is not None:
            disagg.attach(self)

    # -- public API for drivers -------------------------------------------------------------
    def register(self, kind: int, handler: Callable) -> None:
        """Handle events of ``kind`` with ``handler(payload, now)`` (one handler per kind)."""
        kind = int(kind)
        if kind in (PASS_END, ARRIVAL):
            raise ValueError(f"the loop handles {EventKind(kind).name} itself")
        if kind in self._handlers:
            raise ValueError(f"a handler for {EventKind(kind).name} is already registered")
        self._handlers[kind] = handler

    def post(self, time: float, kind: int, payload) -> None:
        """Put an event of ``kind`` on the clock at ``time`` (ordered by :data:`PRIORITY`
        among events of the same instant, then by posting order)."""
        self.events.push(time, PRIORITY[kind], kind, payload)

    def deliver(self, worker: Worker, req: Request, now: float, kv_ready: int = 0) -> None:
        """Hand ``req`` to ``worker``'s engine at ``now``: the worker's decode stretch is cut
        where step-by-step simulation would first see the input, anything the engine ends at
        once (a rejection) is terminal, and the worker decides its next pass at this instant's
        end.  ``kv_ready`` > 0: the prompt's KV arrives computed (disaggregated decode)."""
        new_end = worker.truncate(now)
        if new_end is not None:
            ev_epoch = worker.epoch
            self.events.push(new_end, 0, PASS_END, (worker, ev_epoch))
        if kv_ready:
            worker.engine.add_request(req, now, kv_ready=kv_ready)
        else:
            worker.engine.add_request(req, now)
        self._drain_terminated(worker, now)
        self._dirty.add(worker.worker_id)

    def submit(self, req: Request, now: float) -> None:
        """Send a new request at ``now``: registered with the recorder (its index must be the
        next one) and routed as an arrival (through the frontend when there is one)."""
        self.rec.register(req.index, req.request_id, req.session_id, req.turn,
                          req.input_length, req.output_length, req.warmup)
        req.arrival = now
        self._handle_arrival(req, now)

    def abort(self, index: int, now: float, reason: str = "cancelled by the client") -> str:
        """Abort request ``index`` at ``now`` (its client went away); returns what happened.

        As the real engines do, the abort is handled between engine steps.  On an idle worker
        it takes effect at once: ``"aborted"``.  On a worker with a pass in flight (the request
        may be in it) the pass runs to its end, its tokens count as computed but reach no
        client, and the request is dropped at the pass end before the next pass is chosen:
        ``"deferred"`` (a decode stretch in flight is cut there first, as an arrival cuts it).
        A request still crossing the frontend is dropped when it reaches the router.  Either
        way the engine frees its KV (cached prefix blocks stay cached, evictable) and the
        request ends :attr:`Status.CANCELLED`, once; a deferred abort of a request that the pass
        in flight completes changes nothing (it stays completed).  ``"ended"``: it was already
        terminal, nothing changes.  After an abort outside :meth:`advance_to`, call
        :meth:`start_idle_workers` (as after :meth:`submit`): freed KV may let a waiting
        request in at once.

        Disaggregated prefill/decode is refused (``ValueError``): a request there may be
        between workers, its KV in transfer, which the hand-off does not model undoing.
        """
        if self.disagg is not None:
            raise ValueError("abort is not supported with disaggregated prefill/decode "
                             "(the KV hand-off between workers cannot be undone)")
        if index < 0 or index >= self.rec.size:
            raise ValueError(f"request {index} was never submitted")
        if int(self.rec.column("status")[index]) != int(Status.PENDING):
            return "ended"
        wid = int(self.rec.column("worker")[index])
        if wid < 0:  # not routed yet: in the frontend
            self._abort_on_arrival[index] = reason
            return "deferred"
        worker = self.workers[wid]
        new_end = worker.truncate(now)
        if new_end is not None:
            self.events.push(new_end, 0, PASS_END, (worker, worker.epoch))
        self._dirty.add(wid)
        self._drain_terminated(worker, now)  # what a settle on input committed
        if worker.busy:
            self._aborts.setdefault(wid, []).append((index, reason))
            return "deferred"
        done = worker.engine.abort(index, now, reason)
        self._drain_terminated(worker, now)
        return "aborted" if done else "ended"

    def listen_terminal(self, listener: Callable) -> None:
        """Call ``listener(request, time)`` as each request reaches its terminal state."""
        self._terminal_listener = listener

    def listen_pass_end(self, listener: Callable) -> None:
        """Call ``listener(worker, time)`` after each pass end is committed."""
        self._pass_listener = listener

    # -- workload intake --------------------------------------------------------------
    def _pull(self) -> Request | None:
        """Next request from the source, registered with the recorder."""
        if self._exhausted:
            return None
        try:
            req = next(self.source)
        except StopIteration:
            self._exhausted = True
            return None
        self.rec.register(req.index, req.request_id, req.session_id, req.turn,
                          req.input_length, req.output_length, req.warmup)
        return req

    def _feed_open(self, now: float) -> None:
        """Read ahead until the next independent arrival is known (posted as an event)."""
        while self._lookahead is None:
            req = self._pull()
            if req is None:
                return
            if req.after is not None:
                self._hold_turn(req, now)
                continue
            self._lookahead = req
            self.events.push(req.arrival, 1, ARRIVAL, req)

    def _hold_turn(self, req: Request, now: float) -> None:
        """A later session turn: release it ``delay`` after its previous turn ends."""
        prev_end = self._ended.pop(req.after, None)
        if prev_end is None:
            self._waiting_turns[req.after] = req
            return
        # The previous turn ended before this row was read (the trace placed it late).
        at = prev_end + req.delay
        if at < now:
            self.stats.late_session_turns += 1
            at = now
        req.arrival = at
        self.events.push(at, 1, ARRIVAL, req)

    def _feed_closed(self, now: float) -> None:
        """Keep ``concurrency`` requests in flight; warm-ups run (and end) before the rest."""
        assert self.concurrency is not None
        while self._in_flight < self.concurrency:
            if self._held is not None:
                if self._warmups_left > 0:
                    return
                req, self._held = self._held, None
            else:
                req = self._pull()
                if req is None:
                    return
                if req.warmup:
                    self._warmups_left += 1
                elif self._warmups_left > 0:
                    # Measured requests start once every warm-up request has ended.
                    self._held = req
                    return
            req.arrival = now
            self._in_flight += 1
            self.events.push(now, 1, ARRIVAL, req)

    # -- terminal states -----------------------------------------------------------------
    def _on_terminated(self, req: Request, t: float) -> None:
        self._terminated += 1
        if self.in_flight is not None:
            self.in_flight.deactivate(req)
        if self.mode == "closed":
            self._in_flight -= 1
            if req.warmup:
                self._warmups_left -= 1
        if self._terminal_listener is not None:
            self._terminal_listener(req, t)
        follow = self._waiting_turns.pop(req.index, None)
        if follow is not None:
            follow.arrival = t + follow.delay
            self.events.push(follow.arrival, 1, ARRIVAL, follow)
        elif req.session_id is not None:
            self._ended[req.index] = t

    def _drain_terminated(self, worker: Worker, t: float) -> None:
        eng = worker.engine
        if eng.terminated:
            done, eng.terminated = eng.terminated, []
            if self.disagg is not None:  # prefilled requests move to a decode worker instead
                done = self.disagg.after_pass(self, worker, done, t)
            for req in done:
                self._on_terminated(req, t)

    # -- main loop ---------------------------------------------------------------------
    def run(self) -> RunStats:
        t0 = wallclock.perf_counter()
        self._advance_intake(0.0)
        now = self.advance_to(self.max_sim_time)
        if len(self.events):  # the loop stopped at the first event past the limit
            self.stats.stopped_early = True
            now = self.max_sim_time
        self.stats.sim_end = now
        self._close(now)
        self.stats.wall_seconds = wallclock.perf_counter() - t0
        return self.stats

    def advance_to(self, until: float) -> float:
        """Handle every event at or before ``until``, instant by instant; returns the last
        instant handled (0 if none).

        :meth:`run` is this with the run's time limit; a live driver (``servesim serve``)
        calls it as the wall clock advances, between :meth:`submit` calls.  At each instant
        every event is handled, including arrivals that terminations release at the same
        instant, before any worker decides its next pass.
        """
        events = self.events  # (its methods called on it: a bound method would be a Python call)
        progress = self.progress
        n_events = 0
        now = 0.0
        while len(events):
            now = events.peek_time()
            if now > until:
                break
            while events.peek_time() == now:
                while events.peek_time() == now:
                    payload = events.pop()
                    kind = events.kind
                    n_events += 1
                    if kind == PASS_END:
                        self._handle_pass_end(payload, now)
                    elif kind == ARRIVAL:
                        self._handle_arrival(payload, now)
                    else:  # a driver's event (disaggregation's KV_READY, an agentic RELEASE)
                        self._handlers[kind](payload, now)
                self._advance_intake(now)
            if self._dirty:
                self._start_idle_workers(now)
            if progress is not None:
                progress(self._terminated, now)
        self.stats.events += n_events
        return now

    def start_idle_workers(self, now: float) -> None:
        """Let workers that received input at ``now`` (through :meth:`submit` or
        :meth:`deliver` outside :meth:`advance_to`) start their next pass."""
        self._start_idle_workers(now)

    def next_event_time(self) -> float:
        """When the earliest pending event happens (infinity when none is pending)."""
        return self.events.peek_time()

    def _advance_intake(self, now: float) -> None:
        if self.mode == "closed":
            self._feed_closed(now)
        elif self.mode != "driven":
            self._feed_open(now)

    def _handle_arrival(self, req: Request, now: float) -> None:
        if self._lookahead is req:
            self._lookahead = None
        if self.frontend is not None:
            sent = self._sent.pop(req.index, None)
            if sent is None:  # the client sent it now: it crosses the frontend first
                self._sent[req.index] = now
                self.events.push(self.frontend.admit_time(req, now), 1, ARRIVAL, req)
                return
            self.rec.arrived(req.index, sent)  # latencies count from the client's send
        else:
            self.rec.arrived(req.index, now)
        if self._abort_on_arrival:
            reason = self._abort_on_arrival.pop(req.index, None)
            if reason is not None:  # its client went away while it crossed the frontend
                self.rec.finished(req.index, now, Status.CANCELLED, reason)
                if self.in_flight is not None:  # (it deactivates what it is told of)
                    self.in_flight.activate(req)
                self._on_terminated(req, now)
                return
        if self.in_flight is not None:
            self.in_flight.activate(req)
        if self.router.reads_state:
            self.settle_workers(self.workers, now)
        wid = self.router.choose(req, self.workers, now)
        worker = self.workers[wid]
        self.rec.assigned(req.index, wid)
        self.deliver(worker, req, now, 0)

    def settle_workers(self, workers: Sequence[Worker], now: float) -> None:
        """Commit the workers' stretches up to ``now`` so that their state is what pass-by-pass
        simulation shows at this instant (a router or the disaggregation hand-off reads it)."""
        for worker in workers:
            if worker.settle(now):
                self._dirty.add(worker.worker_id)
            self._drain_terminated(worker, now)  # none expected: a stretch's requests finish at its end

    def _handle_pass_end(self, payload: tuple[Worker, int], now: float) -> None:
        worker, epoch = payload
        if epoch != worker.epoch:
            return  # superseded by a truncation
        worker.finish_pass()
        if self.ts is not None:
            self.ts.sample(worker, now)
        self._drain_terminated(worker, now)
        if self._aborts:
            aborts = self._aborts.pop(worker.worker_id, None)
            if aborts is not None:  # requested during the pass: handled before the next is chosen
                for index, reason in aborts:
                    worker.engine.abort(index, now, reason)
                self._drain_terminated(worker, now)
        self._dirty.add(worker.worker_id)
        if self._pass_listener is not None:
            self._pass_listener(worker, now)

    def _start_idle_workers(self, now: float) -> None:
        if not self._dirty:
            return
        for wid in sorted(self._dirty):
            worker = self.workers[wid]
            if worker.busy:
                continue
            if not worker.engine.has_work():
                if self.ts is not None:
                    self.ts.sample(worker, now, idle=True)
                continue
            end = worker.start_pass(now)
            if end is not None:
                self.events.push(end, 0, PASS_END, (worker, worker.epoch))
        self._dirty.clear()

    def _close(self, now: float) -> None:
        """Everything not terminal when the loop stops becomes unfinished, counted."""
        not_arrived = None
        if self.stats.stopped_early:
            reason = "simulation time limit reached"
            not_arrived = "not arrived before the simulation time limit"
            for worker in self.workers:  # what step mode would have committed by the limit
                worker.close_at(now)
                self._drain_terminated(worker, now)
            for index, sent in self._sent.items():  # sent by the client, still in the API server
                self.rec.arrived(index, sent)
        else:
            reason = "never schedulable (stuck in queue at end of run)"
        # Drain the source so every input request is counted.
        while self._pull() is not None:
            pass
        self.rec.close_unfinished(now, reason, not_arrived)
