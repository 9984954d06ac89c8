"""A minimal timed event queue: the virtual clock under everything else.

It knows nothing about LLMs.  Events at the same time are ordered by a priority class,
then by insertion order, which keeps runs deterministic.

:class:`EventQueue` here is the reference, a ``heapq`` of tuples; ``_event_core.pyx``
compiles the same queue over a C array of events (the loop pops one per event, and there a
pop builds no tuple and compares no Python objects).  :func:`new_event_queue` picks one;
``tests/sim/test_events.py`` runs both through the same operations.
"""

from __future__ import annotations

import heapq
from enum import IntEnum
from typing import Any

from servesim.compiled import compiled_module


class EventKind(IntEnum):
    """Every kind of event the simulation loop handles, in one place.

    The loop handles ``PASS_END`` and ``ARRIVAL`` itself; any other kind goes to the handler
    registered for it (:meth:`servesim.sim.simulation.Simulation.register`): ``KV_READY`` by
    disaggregation (a prompt's KV reaches its decode worker), ``RELEASE`` by an agentic
    workload (a node whose dependencies have fired becomes a request).
    """

    PASS_END = 0
    ARRIVAL = 1
    KV_READY = 2
    RELEASE = 3


#: Priority class of each kind among events of the same instant: pass ends first (their
#: tokens and freed KV are visible to whatever arrives at that instant), then the rest in
#: the order they were posted.
PRIORITY = {EventKind.PASS_END: 0, EventKind.ARRIVAL: 1, EventKind.KV_READY: 1, EventKind.RELEASE: 1}


class EventQueue:
    """Heap of ``(time, priority, seq, kind, payload)``; :meth:`pop` returns the payload and
    leaves the popped event's ``time`` and ``kind`` on the queue."""

    __slots__ = ("_heap", "_seq", "time", "kind")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, int, Any]] = []
        self._seq = 0
        self.time = 0.0
        self.kind = 0

    def push(self, time: float, priority: int, kind: int, payload: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (float(time), priority, self._seq, kind, payload))

    def pop(self) -> Any:
        """The earliest event's payload (its time and kind in ``time``, ``kind``)."""
        self.time, _prio, _seq, self.kind, payload = heapq.heappop(self._heap)
        return payload

    def peek_time(self) -> float:
        """The earliest event's time (infinity when empty)."""
        return self._heap[0][0] if self._heap else float("inf")

    def __len__(self) -> int:
        return len(self._heap)


def new_event_queue() -> EventQueue:
    """The compiled queue where built (``SERVESIM_PURE_PYTHON`` unset), else the reference."""
    return _core.EventQueue() if _core is not None else EventQueue()


_core = compiled_module("sim._event_core")  # bound at import: servesim/compiled.py's rule
