"""How an agentic workload's plays are started: ``workload.agentic`` and the start schedule.

- ``trace`` (default): each play starts at its recorded start, the first at 0, divided by
  ``workload.speedup``;
- ``lanes``: ``lanes`` plays run at once; a play's end frees its lane for the next play of
  the corpus; with ``duration_s`` the corpus wraps (copies with fresh cache identities)
  until that admission deadline;
- ``poisson`` / ``constant``: plays start at ``rate`` per second (seeded), ``plays`` of them
  (default: the corpus once; more wrap with fresh identities).

``workload.speedup`` also divides every floor and dependency delay, in every mode.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .graph import AgenticGraph, PlayStart


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
        return self


def play_starts(graph: AgenticGraph, load: AgenticLoad, speedup: float, seed: int) -> list[PlayStart]:
    """The plays started up front (lanes: the first ``lanes``; the rest follow as lanes free)."""
    n = len(graph.plays)
    if load.arrival == "trace":
        t0 = min(p.start for p in graph.plays)
        return [PlayStart((p.start - t0) / speedup, i) for i, p in enumerate(graph.plays)]
    if load.arrival == "lanes":
        assert load.lanes is not None
        return [PlayStart(0.0, k % n, k // n, lane=k) for k in range(min(load.lanes, n) if load.duration_s is None
                                                                     else load.lanes)]
    assert load.rate is not None
    count = load.plays if load.plays is not None else n
    if load.arrival == "constant":
        times = np.arange(count) / load.rate
    else:
        gaps = np.random.default_rng(seed).exponential(1.0 / load.rate, count)
        times = np.concatenate(([0.0], np.cumsum(gaps[1:])))
    return [PlayStart(float(times[k]), k % n, k // n) for k in range(count)]
