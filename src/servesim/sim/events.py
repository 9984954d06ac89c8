"""A minimal timed event queue: the virtual clock under everything else.

It knows nothing about LLMs.  Events at the same time are ordered by a priority class,
then by insertion order, which keeps runs deterministic.
"""

from __future__ import annotations

import heapq
from typing import Any


class EventQueue:
    """Heap of ``(time, priority, seq, kind, payload)``."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, int, Any]] = []
        self._seq = 0

    def push(self, time: float, priority: int, kind: int, payload: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time, priority, self._seq, kind, payload))

    def pop(self) -> tuple[float, int, Any]:
        time, _prio, _seq, kind, payload = heapq.heappop(self._heap)
        return time, kind, payload

    @property
    def heap(self) -> list[tuple[float, int, int, int, Any]]:
        """The heap itself (earliest event at index 0), for loops that peek once per event."""
        return self._heap

    def peek_time(self) -> float:
        return self._heap[0][0] if self._heap else float("inf")

    def __len__(self) -> int:
        return len(self._heap)
