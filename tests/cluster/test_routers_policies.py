"""Decisions of the load-based routers and session affinity, on hand-built fake workers."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from servesim.cluster.kv_index import KVIndex
from servesim.cluster.routers import (
    KVAwareRouter,
    LeastLoadedRouter,
    PowerOfTwoRouter,
    RoundRobinRouter,
    SessionAffinityRouter,
    build_router,
)
from servesim.engines.base import EngineSnapshot
from servesim.workload.request import Request


def fake_worker(outstanding: int = 0, running: int = 0, waiting: int = 0, kv_used: int = 0):
    snap = EngineSnapshot(running=running, waiting=waiting, kv_used_tokens=kv_used, kv_capacity_tokens=100_000,
                          prompt_tokens=0, cached_prompt_tokens=0, outstanding_tokens=outstanding)
    return SimpleNamespace(engine=SimpleNamespace(snapshot=lambda: snap), busy=False)


def req(i: int = 0, session: str | None = None, hash_ids=(1, 2), input_length: int = 1024) -> Request:
    return Request(index=i, request_id=str(i), arrival=0.0, input_length=input_length, output_length=10,
                   hash_ids=tuple(hash_ids), session_id=session)


def test_build_router_keeps_old_signature():
    assert isinstance(build_router("round_robin", 0), RoundRobinRouter)
    assert isinstance(build_router("least_loaded", 0), LeastLoadedRouter)
    assert isinstance(build_router("power_of_two", 3, {"load_metric": "requests"}), PowerOfTwoRouter)
    assert isinstance(build_router("kv_aware", 0, None, KVIndex()), KVAwareRouter)
    assert isinstance(build_router("session_affinity", 0), SessionAffinityRouter)


@pytest.mark.parametrize("name,options,msg", [
    ("nope", None, "unknown router"),
    ("least_loaded", {"load_metric": "gpus"}, "load_metric"),
    ("round_robin", {"temperature": 1.0}, "no option temperature"),
    ("kv_aware", None, "needs a KVIndex"),
    ("kv_aware", {"temperature": -1}, "temperature"),
])
def test_build_router_errors(name, options, msg):
    with pytest.raises(ValueError, match=msg):
        build_router(name, 0, options, KVIndex() if options else None)


def test_least_loaded_by_tokens_and_by_requests():
    ws = [fake_worker(outstanding=500, running=1), fake_worker(outstanding=100, running=5),
          fake_worker(outstanding=300, running=2)]
    assert build_router("least_loaded", 0).choose(req(), ws, 0.0) == 1
    assert build_router("least_loaded", 0, {"load_metric": "requests"}).choose(req(), ws, 0.0) == 0


def test_least_loaded_ties_rotate():
    ws = [fake_worker(outstanding=5), fake_worker(outstanding=1), fake_worker(outstanding=1),
          fake_worker(outstanding=1)]
    r = build_router("least_loaded", 0)
    # Tied workers 1, 2, 3 are taken in turn (the loads here never change).
    assert [r.choose(req(), ws, 0.0) for _ in range(4)] == [1, 2, 3, 1]


def test_power_of_two_picks_less_loaded_of_the_sampled_pair():
    ws = [fake_worker(outstanding=x) for x in (40, 10, 30, 20)]
    r = build_router("power_of_two", 7)
    picks = [r.choose(req(), ws, 0.0) for _ in range(400)]
    # The most loaded worker can never win a pair; the least loaded wins every pair it is in.
    counts = Counter(picks)
    assert counts[0] == 0
    assert counts[1] > counts[3] > counts[2] > 0
    # Reproducible by seed, different across seeds.
    r2 = build_router("power_of_two", 7)
    assert [r2.choose(req(), ws, 0.0) for _ in range(400)] == picks
    r3 = build_router("power_of_two", 8)
    assert [r3.choose(req(), ws, 0.0) for _ in range(400)] != picks


def test_power_of_two_single_worker():
    assert build_router("power_of_two", 0).choose(req(), [fake_worker()], 0.0) == 0


def test_session_affinity_is_sticky():
    loads = [0, 0, 0]
    ws = [SimpleNamespace(engine=SimpleNamespace(
        snapshot=lambda i=i: EngineSnapshot(0, 0, 0, 1, 0, 0, loads[i]))) for i in range(3)]
    r = build_router("session_affinity", 0)
    first = r.choose(req(0, "a"), ws, 0.0)
    assert first == 0
    loads[0] = 10_000  # worker 0 becomes the busiest: later turns of "a" still go there
    assert r.choose(req(1, "a"), ws, 1.0) == 0
    b = r.choose(req(2, "b"), ws, 1.0)  # a new session goes to the least loaded
    assert b in (1, 2)
    loads[b] = 20_000
    assert r.choose(req(3, "b"), ws, 2.0) == b
    assert r.choose(req(4, "a"), ws, 2.0) == 0
    # Requests without a session use the fallback (least loaded now: the remaining worker).
    assert r.choose(req(5, None), ws, 2.0) == ({1, 2} - {b}).pop()


def test_session_affinity_with_other_fallback():
    ws = [fake_worker(), fake_worker()]
    r = build_router("session_affinity", 0, {"fallback": "round_robin"})
    assert [r.choose(req(i, "s"), ws, 0.0) for i in range(3)] == [0, 0, 0]
    assert r.choose(req(9, "t"), ws, 0.0) == 1
