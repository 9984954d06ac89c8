"""The bookkeeping of AgentX's phases for the agentic driver (``sim/agentic.py``).

- :class:`Warmup`: which warm-up request comes next: every primer at once, then each lane's
  one-token requests one after another, and the barrier when the last of them ends;
- :class:`ProfileWindow`: the measured window's deadlines (admission cutoff, grace, drain)
  and the idle-wait caps, with the releases posted but not yet sent (the client-idle cap
  moves the earliest of them forward).

The options and the snapshot planning are ``workload/agentic/phases.py``.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from servesim.workload.agentic.phases import ProfileOptions

#: Warm-up stages.
PRIMERS, LANES, DONE = range(3)


@dataclass
class LaneWarmup:
    """A lane's warm-up requests: ``count`` copies of ``node``'s prompt for run ``run``."""

    run: int
    node: int
    count: int


@dataclass
class Warmup:
    """Primers (run, node) first, then the lanes' requests; ``open`` counts those in flight."""

    primers: list[tuple[int, int]]
    lanes: list[LaneWarmup]
    stage: int = PRIMERS
    open: int = 0
    #: Requests sent, by kind (for the summary).
    sent_primers: int = 0
    sent_lane: int = 0
    #: Per run index: the lane warm-ups it still has to send.
    left: dict[int, int] = field(default_factory=dict)

    def first(self) -> list[tuple[str, int, int]]:
        """The requests to send when the warm-up starts: ``(kind, run, node)``."""
        if self.primers:
            return [("primer", r, i) for r, i in self.primers]
        return self._start_lanes()

    def ended(self, kind: str, run: int) -> list[tuple[str, int, int]]:
        """A warm-up request of ``run`` ended: what to send next (empty at the barrier too)."""
        self.open -= 1
        if kind == "warmup" and self.left.get(run, 0) > 0:
            return [self._next_of(run)]
        if self.open:
            return []
        if self.stage == PRIMERS:
            return self._start_lanes()
        self.stage = DONE
        return []

    @property
    def settled(self) -> bool:
        """The barrier: every warm-up request has ended."""
        return self.stage == DONE

    def _start_lanes(self) -> list[tuple[str, int, int]]:
        self.stage = LANES
        self.left = {w.run: w.count for w in self.lanes if w.count > 0}
        out = [self._next_of(run) for run in list(self.left)]
        if not out:
            self.stage = DONE
        return out

    def _next_of(self, run: int) -> tuple[str, int, int]:
        self.left[run] -= 1
        node = next(w.node for w in self.lanes if w.run == run)
        return ("warmup", run, node)

    def sent(self, kind: str) -> None:
        self.open += 1
        if kind == "primer":
            self.sent_primers += 1
        else:
            self.sent_lane += 1


class ProfileWindow:
    """The measured window from the barrier ``start``, and the idle-wait caps."""

    def __init__(self, options: ProfileOptions, start: float) -> None:
        self.options = options
        self.start = start
        self.cutoff = start + options.duration_s
        self.grace_deadline = self.cutoff + options.grace_s
        #: Set when the grace deadline cancels what is still in flight.
        self.drain_deadline = math.nan
        #: Requests cancelled at the grace deadline (their indices).
        self.cancelled: list[int] = []
        #: Nodes whose release fell after the cutoff: never issued.
        self.not_issued = 0
        #: Releases posted and not yet handled: (time, order, run, node position).
        self._pending: list[tuple[float, int, int, int]] = []
        self._order = 0

    def cap_play_wait(self, at: float, ready: float) -> float:
        """A node ready at ``ready`` waits at most ``play_idle_cap_s`` for its release."""
        cap = self.options.play_idle_cap_s
        return min(at, ready + cap) if cap is not None else at

    def admits(self, at: float) -> bool:
        return at <= self.cutoff

    def posted(self, at: float, run: int, k: int) -> None:
        if self.options.client_idle_cap_s is not None:
            heapq.heappush(self._pending, (at, self._order, run, k))
            self._order += 1

    def prune(self, is_live) -> None:
        """Drop the earliest releases already handled or moved (``is_live(at, run, k)`` false),
        so that the heap holds about the releases still pending."""
        pending = self._pending
        while pending and not is_live(pending[0][0], pending[0][2], pending[0][3]):
            heapq.heappop(pending)

    def earliest_to_pull(self, now: float, is_live) -> list[tuple[float, int, int]]:
        """The client is idle at ``now``: when its next release is more than
        ``client_idle_cap_s`` away, those releases (old time, run, position) move to
        ``now + cap``; ``is_live(at, run, k)`` tells a release still due at ``at``."""
        cap = self.options.client_idle_cap_s
        self.prune(is_live)
        pending = self._pending
        if cap is None or not pending or pending[0][0] <= now + cap:
            return []
        first = pending[0][0]
        out = []
        while pending and pending[0][0] == first:
            at, _, run, k = heapq.heappop(pending)
            if is_live(at, run, k):
                out.append((at, run, k))
        return out
