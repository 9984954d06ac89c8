"""AgentX's load phases as options of ``workload.agentic``: snapshot, warm-up, profile.

AgentX (AISimulate's AgentX replay; AIPerf's AgentX mode with the noted difference) does
not start a benchmark on cold, empty plays: it joins plays in progress, so that the server
sees the long contexts a running agent fleet holds.

- ``snapshot``: each initial lane starts its play at a seeded cut between ``min_fraction``
  and ``max_fraction`` of the play's span (the last node's recorded start); nodes recorded
  before the cut are *history*, never sent (AIPerf cuts anywhere: 0 to 1);
- ``warmup``: before measuring, one *primer* per conversation with history (its last
  historical prompt, one output token) refills the caches with what the agents had built;
  then ``requests_per_lane`` one-token requests per lane repeat the lane's primed context;
  a barrier waits for all of them to end; measurement starts there, caches kept;
- ``profile``: plays are admitted for ``duration_s`` after the barrier, responses get
  ``grace_s`` more, then what is still in flight is cancelled and the server has ``drain_s``
  to settle; idle waits are capped (``play_idle_cap_s`` for a node's wait inside a play,
  ``client_idle_cap_s`` when nothing at all is in flight).

This module holds the options and the pure planning (cuts, history, primers); the release
driver (``sim/agentic.py``, ``sim/agentic_phases.py``) runs them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .graph import AgenticGraph

#: What a request of an agentic run is: a node of a play run, or a warm-up copy of one (its
#: prompt, one output token) sent as a primer or as a lane's warm-up request.
PLAY, PRIMER, LANE_WARMUP = range(3)
#: Mixed into the run seed so that the cuts' draws are a stream of their own.
_SNAPSHOT_STREAM = 0x5A4B


class SnapshotOptions(BaseModel):
    """``workload.agentic.snapshot``: where each initial lane joins its play."""

    model_config = ConfigDict(extra="forbid")

    seed: int | None = Field(None, ge=0, description="seed of the cuts (default: the run's seed)")
    min_fraction: float = Field(0.25, ge=0.0, le=1.0, description="earliest cut, as a fraction of the play's span")
    max_fraction: float = Field(0.75, ge=0.0, le=1.0, description="latest cut, as a fraction of the play's span")

    @model_validator(mode="after")
    def _ordered(self) -> "SnapshotOptions":
        if self.min_fraction > self.max_fraction:
            raise ValueError(f"snapshot.min_fraction ({self.min_fraction:g}) must not exceed "
                             f"snapshot.max_fraction ({self.max_fraction:g})")
        return self


class WarmupOptions(BaseModel):
    """``workload.agentic.warmup``: primers, per-lane warm-up requests, then a barrier."""

    model_config = ConfigDict(extra="forbid")

    primers: bool = Field(True, description="one primer per conversation with history (last historical "
                                            "prompt, one output token)")
    requests_per_lane: int = Field(2, ge=0, description="one-token requests per lane, one after another, "
                                                        "repeating the lane's primed context")


class ProfileOptions(BaseModel):
    """``workload.agentic.profile``: the measured window and its idle-wait caps (seconds)."""

    model_config = ConfigDict(extra="forbid")

    duration_s: float = Field(3600.0, gt=0, description="plays and requests are admitted this long after "
                                                        "the barrier")
    grace_s: float = Field(30.0, ge=0, description="after the admission cutoff, requests in flight may end; "
                                                   "then they are cancelled")
    drain_s: float = Field(10.0, ge=0, description="after the cancellations, the server's time to settle "
                                                   "(a later settle is reported)")
    play_idle_cap_s: float | None = Field(300.0, gt=0, description="longest wait of a node once it is ready "
                                                                   "(dependency delays, floors); null: no cap")
    client_idle_cap_s: float | None = Field(10.0, gt=0, description="longest gap with nothing in flight "
                                                                    "anywhere; null: no cap")


@dataclass(frozen=True)
class Snapshot:
    """One lane's cut: at ``cut`` trace seconds after its play's start; ``history`` nodes
    (graph indices) were recorded before it and are never sent."""

    cut: float
    fraction: float
    history: frozenset[int]


def play_span(graph: AgenticGraph, play: int) -> float:
    """The play's span: its last node's recorded start (floors count from the play's start)."""
    return max(graph.nodes[i].not_before for i in graph.plays[play].nodes)


def cut_play(graph: AgenticGraph, play: int, fraction: float) -> Snapshot:
    """The snapshot of ``play`` at ``fraction`` of its span.

    A node is history when it was recorded before the cut and everything it depends on is
    history too (a node cannot have run before the requests it waited for)."""
    cut = fraction * play_span(graph, play)
    history: set[int] = set()
    for i in graph.plays[play].nodes:  # topological: sources first
        node = graph.nodes[i]
        if node.not_before < cut and all(d.source in history for d in node.deps):
            history.add(i)
    return Snapshot(cut, fraction, frozenset(history))


def draw_fractions(options: SnapshotOptions, lanes: int, run_seed: int) -> list[float]:
    """One seeded cut fraction per initial lane, in lane order."""
    seed = options.seed if options.seed is not None else run_seed
    rng = np.random.default_rng([seed, _SNAPSHOT_STREAM])
    return [float(x) for x in rng.uniform(options.min_fraction, options.max_fraction, lanes)]


def primer_nodes(graph: AgenticGraph, play: int, history: frozenset[int]) -> list[int]:
    """Per conversation (session) with history, its last historical node (latest recorded
    start; the later in topological order on a tie), in the play's order."""
    last: dict[str, int] = {}
    for i in graph.plays[play].nodes:
        if i in history:
            s = graph.nodes[i].session
            j = last.get(s)
            if j is None or graph.nodes[i].not_before >= graph.nodes[j].not_before:
                last[s] = i
    return sorted(last.values(), key=graph.plays[play].nodes.index)


def lane_context(graph: AgenticGraph, primers: list[int]) -> int | None:
    """The node whose prompt a lane's warm-up requests repeat: its longest primed prompt."""
    if not primers:
        return None
    return max(primers, key=lambda i: (graph.nodes[i].input_length, -primers.index(i)))
