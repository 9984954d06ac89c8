"""The event queue: order by time, then priority class, then insertion; the compiled queue
pops what the ``heapq`` reference pops."""

from __future__ import annotations

import gc
import math
import random
import sys

import pytest

from servesim.compiled import compiled_module
from servesim.sim.events import EventQueue

core = compiled_module("sim._event_core")
needs_core = pytest.mark.skipif(core is None, reason="compiled extensions not built")
QUEUES = [EventQueue, pytest.param(lambda: core.EventQueue(), marks=needs_core)]


@pytest.mark.parametrize("make", QUEUES)
def test_order_time_then_priority_then_insertion(make):
    q = make()
    assert len(q) == 0 and q.peek_time() == math.inf
    q.push(2.0, 1, 7, "late")
    q.push(1.0, 1, 5, "arrival")
    q.push(1.0, 0, 6, "pass end")  # same time, lower class: first
    q.push(1.0, 1, 5, "second arrival")  # same time and class: after the earlier push
    q.push(1, 1, 8)  # an int time is a float time; no payload is None
    assert len(q) == 5 and q.peek_time() == 1.0
    got = []
    while len(q):
        payload = q.pop()
        got.append((q.time, q.kind, payload))
    assert got == [(1.0, 6, "pass end"), (1.0, 5, "arrival"), (1.0, 5, "second arrival"), (1.0, 8, None),
                   (2.0, 7, "late")]
    with pytest.raises(IndexError):
        q.pop()


@needs_core
@pytest.mark.parametrize("seed", range(5))
def test_compiled_queue_pops_like_the_reference(seed):
    rng = random.Random(seed)
    ref, fast = EventQueue(), core.EventQueue()
    for step in range(3000):
        if rng.random() < 0.55 or not len(ref):
            t, prio, kind = float(rng.randrange(40)), rng.randrange(2), rng.randrange(3)
            payload = object()
            ref.push(t, prio, kind, payload)
            fast.push(t, prio, kind, payload)
        else:
            assert ref.pop() is fast.pop()
            assert (ref.time, ref.kind) == (fast.time, fast.kind)
        assert len(ref) == len(fast) and ref.peek_time() == fast.peek_time()


@needs_core
def test_compiled_queue_holds_and_releases_payloads():
    q = core.EventQueue()
    payload = object()
    refs = sys.getrefcount(payload)
    q.push(1.0, 0, 0, payload)
    q.push(2.0, 0, 0, payload)
    assert sys.getrefcount(payload) == refs + 2
    assert q.pop() is payload
    assert sys.getrefcount(payload) == refs + 1
    del q
    gc.collect()
    assert sys.getrefcount(payload) == refs
