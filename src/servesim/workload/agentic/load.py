"""How an agentic workload's plays are started: ``workload.agentic`` and the start schedule.

- ``trace`` (default): each play starts at its recorded start, the first at 0, divided by
  ``workload.speedup``;
- ``lanes``: ``lanes`` plays run at once; a play's end frees its lane for the next play of
  the corpus; with ``duration_s`` the corpus wraps (copies with fresh cache identities)
  until that admission deadline;
- ``poisson`` / ``constant``: plays start at ``rate`` per second (seeded), ``plays`` of them
  (default: the corpus once; more wrap with fresh identities).

``workload.speedup`` also divides every floor and dependency delay, in every mode.

With lanes, AgentX's phases are options (``phases.py``): ``snapshot`` (initial lanes join
their plays at a seeded cut), ``warmup`` (primers, per-lane warm-up requests and a barrier
before measuring) and ``profile`` (an admission window, a grace, a drain, idle-wait caps).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .graph import AgenticGraph, PlayStart
from .phases import ProfileOptions, SnapshotOptions, WarmupOptions


class AgenticLoad(BaseModel):
    """``workload.agentic``: when plays start and how dependent requests are released."""

    model_config = ConfigDict(extra="forbid")

    arrival: Literal["trace", "lanes", "poisson", "constant"] = Field(
        "trace", description="how plays start (trace timestamps, a closed loop of lanes, or a play rate)")
    lanes: int | None = Field(None, gt=0, description="plays in flight at once (arrival: lanes)")
    rate: float | None = Field(None, gt=0, description="plays started per second (arrival: poisson or constant)")
    plays: int | None = Field(None, gt=0, description="plays to start (poisson/constant; default: the corpus once)")
    duration_s: float | None = Field(None, gt=0, description="lanes: keep recycling plays until this time (s)")
    floors: bool = Field(True, description="a dependent node is never released before its recorded offset "
                                           "from the play start (not_before); off: dependencies alone")
    warmup_plays: int = Field(0, ge=0, description="the first N plays started warm the caches: they run like the "
                                                   "others but are left out of the metrics")
    snapshot: SnapshotOptions | None = Field(None, description="lanes: each initial lane joins its play at a "
                                                               "seeded cut; earlier nodes are history")
    warmup: WarmupOptions | None = Field(None, description="lanes with a snapshot: primers, per-lane warm-up "
                                                           "requests and a barrier before measuring")
    profile: ProfileOptions | None = Field(None, description="lanes: the admission window after the barrier, "
                                                             "its grace and drain, and idle-wait caps")

    @model_validator(mode="after")
    def _fields_match_arrival(self) -> "AgenticLoad":
        a = self.arrival
        if a == "lanes" and self.lanes is None:
            raise ValueError("arrival 'lanes' needs lanes: N (plays in flight at once)")
        if a != "lanes" and (self.lanes is not None or self.duration_s is not None):
            raise ValueError(f"lanes and duration_s apply to arrival 'lanes' (arrival is '{a}')")
        if a in ("poisson", "constant") and self.rate is None:
            raise ValueError(f"arrival '{a}' needs rate: plays per second")
        if a not in ("poisson", "constant") and (self.rate is not None or self.plays is not None):
            raise ValueError(f"rate and plays apply to arrival 'poisson' or 'constant' (arrival is '{a}')")
        self._phases_match()
        return self

    def _phases_match(self) -> None:
        """AgentX's phases run on lanes; warm-up needs history to prime; one admission deadline."""
        used = [k for k in ("snapshot", "warmup", "profile") if getattr(self, k) is not None]
        if used and self.arrival != "lanes":
            raise ValueError(f"{', '.join(used)} apply to arrival 'lanes' (arrival is '{self.arrival}')")
        if self.warmup is not None and self.snapshot is None:
            raise ValueError("warmup primes the history of a snapshot: set snapshot too (e.g. snapshot: {})")
        if self.warmup is not None and self.warmup_plays:
            raise ValueError("warmup and warmup_plays are two ways to warm the caches: set one of them")
        if self.profile is not None and self.duration_s is not None:
            raise ValueError("profile.duration_s is the admission deadline with a profile: leave duration_s unset")

    @property
    def admission_window(self) -> float | None:
        """How long lanes keep taking plays (wrapping to fresh copies), if they recycle at all."""
        return self.profile.duration_s if self.profile is not None else self.duration_s


def play_starts(graph: AgenticGraph, load: AgenticLoad, speedup: float, seed: int) -> list[PlayStart]:
    """The plays started up front (lanes: the first ``lanes``; the rest follow as lanes free)."""
    n = len(graph.plays)
    if load.arrival == "trace":
        t0 = min(p.start for p in graph.plays)
        return [PlayStart((p.start - t0) / speedup, i) for i, p in enumerate(graph.plays)]
    if load.arrival == "lanes":
        assert load.lanes is not None
        count = min(load.lanes, n) if load.admission_window is None else load.lanes
        return [PlayStart(0.0, k % n, k // n, lane=k) for k in range(count)]
    assert load.rate is not None
    count = load.plays if load.plays is not None else n
    if load.arrival == "constant":
        times = np.arange(count) / load.rate
    else:
        gaps = np.random.default_rng(seed).exponential(1.0 / load.rate, count)
        times = np.concatenate(([0.0], np.cumsum(gaps[1:])))
    return [PlayStart(float(times[k]), k % n, k // n) for k in range(count)]
