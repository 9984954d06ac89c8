"""The simulation's public API: events posted by a driver, handlers by kind, requests submitted
and delivered from outside the loop, terminal and pass-end listeners."""

from __future__ import annotations

import pytest

from servesim.cluster.routers import RoundRobinRouter
from servesim.cluster.worker import Worker
from servesim.engines.base import EngineLimits
from servesim.engines.vllm.scheduler import VLLMEngine
from servesim.engines.vllm.options import VLLMOptions
from servesim.metrics.recorder import RequestRecorder, Status
from servesim.perf.simple import FixedStepTime
from servesim.sim.events import PRIORITY, EventKind
from servesim.sim.simulation import Simulation
from tests.simharness import make_request


def _sim(workers: int = 1) -> Simulation:
    rec = RequestRecorder()
    lim = EngineLimits(kv_capacity_tokens=1 << 16, context_length=32768)
    opts = VLLMOptions(name="vllm", max_num_batched_tokens=8192, max_num_seqs=64)
    ws = [Worker(i, VLLMEngine(i, rec, lim, opts), FixedStepTime(0.01), 1) for i in range(workers)]
    return Simulation(iter(()), "driven", None, ws, RoundRobinRouter(), rec)


def test_every_kind_has_a_priority_and_pass_ends_come_first():
    assert set(PRIORITY) == set(EventKind)
    assert PRIORITY[EventKind.PASS_END] < min(PRIORITY[k] for k in EventKind if k != EventKind.PASS_END)


def test_the_loop_keeps_its_own_kinds_and_one_handler_per_kind():
    sim = _sim()
    with pytest.raises(ValueError, match="PASS_END"):
        sim.register(EventKind.PASS_END, lambda p, t: None)
    sim.register(EventKind.RELEASE, lambda p, t: None)
    with pytest.raises(ValueError, match="already"):
        sim.register(EventKind.RELEASE, lambda p, t: None)


def test_a_driver_releases_a_request_when_another_ends():
    """Request 1 is released 0.5 s after request 0 ends, through a posted RELEASE event."""
    sim = _sim()
    ended: list[tuple[int, float]] = []
    passes: list[float] = []

    def on_terminal(req, t):
        ended.append((req.index, t))
        if req.index == 0:
            sim.post(t + 0.5, EventKind.RELEASE, make_request(1, 0.0, 100, 3))

    sim.register(EventKind.RELEASE, lambda req, now: sim.submit(req, now))
    sim.listen_terminal(on_terminal)
    sim.listen_pass_end(lambda w, t: passes.append(t))
    sim.post(1.0, EventKind.RELEASE, make_request(0, 0.0, 100, 2))
    sim.run()
    rec = sim.rec
    assert rec.size == 2
    assert [i for i, _ in ended] == [0, 1]
    # Request 0: arrives at 1.0, prefill pass (first token) and one decode pass of 0.01 s.
    assert ended[0][1] == pytest.approx(1.02)
    assert rec.column("arrival")[1] == pytest.approx(1.52)
    assert ended[1][1] == pytest.approx(1.55)
    assert list(rec.column("status")) == [Status.COMPLETED, Status.COMPLETED]
    assert passes and passes == sorted(passes) and passes[-1] == pytest.approx(1.55)


def test_deliver_hands_a_request_to_a_chosen_worker():
    sim = _sim(workers=2)
    req = make_request(0, 0.0, 100, 2)

    def handle(payload, now):
        sim.rec.register(0, "r0", None, 0, 100, 2, False)
        sim.rec.arrived(0, now)
        sim.deliver(sim.workers[1], payload, now)

    sim.register(EventKind.RELEASE, handle)
    sim.post(0.25, EventKind.RELEASE, req)
    sim.run()
    assert sim.workers[1].passes == 2 and sim.workers[0].passes == 0
    assert sim.rec.column("status")[0] == Status.COMPLETED
