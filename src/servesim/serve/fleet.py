"""The simulated fleet on the wall clock: requests come in live, tokens come out when their pass ends.

:class:`LiveFleet` builds the deployment of a config exactly as ``servesim predict`` does
(engines, step-time model, router, disaggregation) and drives its :class:`Simulation` in
``"driven"`` mode: an HTTP handler :meth:`LiveFleet.submit`\\ s a request at the current
virtual time, and :meth:`LiveFleet.run` advances the virtual clock with the wall clock
(``speed`` times faster), handling each event when its time comes.  A pass's tokens reach the
request's :class:`Stream` when the pass ends in the simulation, so a client sees the engine
model's TTFT and inter-token gaps plus the real HTTP stack's own latency.

Passes run one at a time (no fast-forward of decode stretches): a live request can arrive at
any moment, and each pass end is an event the streams wait for.  What the fleet does not
model: the client-side and API-server costs of ``perf.frontend`` / the calibration (the real
HTTP server and client add their own).

A client that goes away (:meth:`LiveFleet.cancel`) aborts its request in the simulated engine
(:meth:`Simulation.abort`): it leaves the queue or the batch, its KV is freed (its cached
prefix stays cached), and it ends ``cancelled``.  Nothing per request outlives its end here:
the stream leaves :attr:`LiveFleet.active` when its request ends, and what remains of a
served request is its row of the recorder's columns (a few numbers and its id).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from servesim.cluster.deployment import build_deployment
from servesim.cluster.worker import Worker
from servesim.config import Config
from servesim.engines.base import EngineSnapshot
from servesim.kvcache.events import KVEvent
from servesim.metrics.recorder import RequestRecorder, Status
from servesim.serve.prompts import EncodedPrompt
from servesim.sim.simulation import Simulation
from servesim.workload.request import Request


@dataclass
class StreamEvent:
    """What a stream receives: ``tokens`` new tokens at virtual time ``t``, or its end."""

    kind: str  # "tokens" | "end"
    t: float
    tokens: int = 0
    status: str = ""
    reason: str = ""


@dataclass
class Stream:
    """One served request, as its HTTP handler sees it."""

    request: Request
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    #: Tokens handed to the stream so far.
    delivered: int = 0
    #: Virtual times of the first token and of the end (NaN until then).
    first_token_t: float = math.nan
    end_t: float = math.nan
    status: str = "pending"
    reason: str = ""
    cancelled: bool = False
    #: OpenAI's finish reason when it completes: "length" (max_tokens) or "stop" (its natural end).
    finish_reason: str = "length"


class FleetObserver(Protocol):
    """Told of each served request's progress (the Prometheus metrics)."""

    def started(self, stream: Stream) -> None: ...

    def tokens(self, stream: Stream, n: int, t: float) -> None: ...

    def ended(self, stream: Stream) -> None: ...


class _PinnedRouter:
    """The configured router, unless the request was sent to one worker's own endpoint."""

    def __init__(self, router) -> None:
        self.router = router
        self.reads_state = router.reads_state
        self.pin: int | None = None

    def choose(self, req: Request, workers: Sequence[Worker], now: float) -> int:
        if self.pin is not None:
            return self.pin
        return self.router.choose(req, workers, now)


_STATUS_NAMES = {int(Status.COMPLETED): "completed", int(Status.REJECTED): "rejected",
                 int(Status.UNFINISHED): "unfinished", int(Status.CANCELLED): "cancelled"}


class LiveFleet:
    """A deployment's engine models run on the wall clock, fed by live requests."""

    def __init__(self, cfg: Config, speed: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 kv_sink: Callable[[KVEvent], None] | None = None,
                 observer: FleetObserver | None = None) -> None:
        if not speed > 0 or math.isinf(speed):
            raise ValueError(f"--speed must be a positive finite number, got {speed}")
        self.cfg = cfg
        self.speed = speed
        self.clock = clock
        self.observer = observer
        self.deployment = build_deployment(cfg)
        self.recorder = RequestRecorder()
        self.workers = self.deployment.make_workers(self.recorder, fast_forward=False, kv_event_log=kv_sink)
        self.router = _PinnedRouter(self.deployment.make_router(cfg.seed))
        self.sim = Simulation(requests=iter(()), mode="driven", concurrency=None, workers=self.workers,
                              router=self.router, recorder=self.recorder,
                              disagg=getattr(self.deployment, "coordinator", None))
        self.sim.listen_terminal(self._on_terminal)
        self.sim.listen_pass_end(self._on_pass_end)
        self.active: dict[int, Stream] = {}
        self._next_index = 0
        self._t0 = clock()
        self._wake: asyncio.Event | None = None
        self._closing = False
        #: Called after every advance of the clock (the KV event publisher flushes there).
        self.after_advance: list[Callable[[], None]] = []

    # -- time ----------------------------------------------------------------------------
    def now(self) -> float:
        """The virtual time now: wall seconds since start, times ``speed``."""
        return (self.clock() - self._t0) * self.speed

    def sync(self) -> float:
        """Handle every event due by now (so state reads what the simulation shows now)."""
        now = self.now()
        self.sim.advance_to(now)
        for hook in self.after_advance:
            hook()
        return now

    def wall_delay(self, virtual_t: float) -> float:
        """Wall seconds until virtual time ``virtual_t`` (0 if it has passed)."""
        return max(0.0, (virtual_t - self.now()) / self.speed)

    # -- requests ------------------------------------------------------------------------
    def submit(self, prompt: EncodedPrompt, output_tokens: int, request_id: str, block_size: int,
               worker: int | None = None, finish_reason: str = "length") -> Stream:
        """Send a request now; its tokens arrive on the returned stream.

        ``worker``: the worker whose own endpoint received it (bypasses the router).
        """
        if worker is not None and not 0 <= worker < len(self.workers):
            raise ValueError(f"worker {worker} does not exist (0..{len(self.workers) - 1})")
        now = self.sync()
        req = Request(self._next_index, request_id, now, prompt.input_length, max(1, output_tokens),
                      prompt.hash_ids, block_size)
        self._next_index += 1
        stream = Stream(req, finish_reason=finish_reason)
        self.active[req.index] = stream
        if self.observer is not None:
            self.observer.started(stream)
        self.router.pin = worker
        try:
            self.sim.submit(req, now)
        finally:
            self.router.pin = None
        self.sim.start_idle_workers(now)
        if self._wake is not None:
            self._wake.set()
        return stream

    def cancel(self, stream: Stream, reason: str = "cancelled by the client") -> str:
        """The client went away: stop delivering to the stream and abort its request in the
        simulated engine, which frees its KV (at once, or at the end of the pass in flight).

        Returns :meth:`Simulation.abort`'s answer (``"aborted"``, ``"deferred"`` or ``"ended"``).
        """
        stream.cancelled = True
        if stream.request.index not in self.active:
            return "ended"
        now = self.sync()
        outcome = self.sim.abort(stream.request.index, now, reason)
        self.sim.start_idle_workers(now)  # freed KV may let a waiting request in now
        for hook in self.after_advance:  # (the KV events of the release)
            hook()
        if self._wake is not None:
            self._wake.set()
        return outcome

    # -- the clock loop ------------------------------------------------------------------
    async def run(self) -> None:
        """Advance the simulation with the wall clock until :meth:`close`."""
        self._wake = asyncio.Event()
        while not self._closing:
            self.sync()
            nxt = self.sim.next_event_time()
            timeout = None if math.isinf(nxt) else self.wall_delay(nxt)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except asyncio.TimeoutError:
                pass

    def close(self) -> None:
        self._closing = True
        if self._wake is not None:
            self._wake.set()

    # -- state for /metrics and /health ---------------------------------------------------
    def snapshots(self) -> list[EngineSnapshot]:
        self.sync()
        return [w.engine.snapshot() for w in self.workers]

    # -- simulation listeners ------------------------------------------------------------
    def _deliver_tokens(self, stream: Stream, t: float) -> None:
        generated = self.recorder.generated_of(stream.request.index)
        new = generated - stream.delivered
        if new <= 0:
            return
        if stream.delivered == 0:
            stream.first_token_t = t
        stream.delivered = generated
        if self.observer is not None:
            self.observer.tokens(stream, new, t)
        if not stream.cancelled:
            stream.queue.put_nowait(StreamEvent("tokens", t, tokens=new))

    def _on_pass_end(self, worker: Worker, t: float) -> None:
        for stream in self.active.values():
            self._deliver_tokens(stream, t)

    def _on_terminal(self, req: Request, t: float) -> None:
        stream = self.active.pop(req.index, None)
        if stream is None:
            return
        self._deliver_tokens(stream, t)
        stream.end_t = t
        stream.status = _STATUS_NAMES.get(int(self.recorder.column("status")[req.index]), "unfinished")
        stream.reason = self.recorder.reason[req.index]
        if self.observer is not None:
            self.observer.ended(stream)
        stream.queue.put_nowait(StreamEvent("end", t, status=stream.status, reason=stream.reason))
