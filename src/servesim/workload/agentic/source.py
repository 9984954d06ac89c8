"""An agentic workload as a source: the graph (built once, checked before the run) and its play
starts."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from typing import Callable, Iterator, Sequence


from servesim.gc_threshold import fewer_collections

from .graph import AgenticGraph, PlayStart
from .load import AgenticLoad, play_starts


@dataclass
class AgenticSource:
    """What the simulation's agentic driver needs: the graph, the starts, the release options."""

    #: Builds the graph: a trace reader or the synthetic generator (called once).
    make_graph: Callable[[], AgenticGraph]
    load: AgenticLoad
    speedup: float = 1.0
    _graph: AgenticGraph | None = field(default=None, repr=False)

    def graph(self) -> AgenticGraph:
        """The lowered graph (built on first use; a bad trace raises WorkloadError)."""
        if self._graph is None:
            with fewer_collections():  # a reader allocates a few containers per block id (gc_threshold.py)
                self._graph = self.make_graph()
        return self._graph

    def starts(self, seed: int) -> list[PlayStart]:
        return play_starts(self.graph(), self.load, self.speedup, seed)

    @property
    def recycles(self) -> bool:
        """Whether plays may run more than once (copies with fresh block ids the graph does not list)."""
        ld = self.load
        n = len(self.graph().plays)
        return (ld.arrival == "lanes" and ld.admission_window is not None) or (ld.plays is not None and ld.plays > n)

    def request_count(self) -> int | None:
        """Requests the run sends, when known before it: every node once (None with recycled
        plays, a play count, a duration, a snapshot, warm-up or a profile window).  A play
        that fails skips its pending nodes, so the run may send fewer."""
        ld = self.load
        if self.recycles or ld.plays is not None or ld.duration_s is not None or ld.snapshot is not None \
                or ld.warmup is not None or ld.profile is not None:
            return None
        return len(self.graph().nodes)

    def dense_listed_ids(self) -> tuple[Iterator[Sequence[int]], int] | None:
        """Every node's prompt and answer ids and the graph's id count (its ids are dense,
        ``0 .. n_ids - 1``); None when plays recycle."""
        if self.recycles:
            return None
        graph = self.graph()
        return chain.from_iterable((node.hash_ids, node.output_hash_ids) for node in graph.nodes), graph.n_ids

    def describe(self) -> str:
        load = self.load
        desc = self.graph().description + f", plays by {load.arrival}"
        if load.arrival == "lanes":
            desc += f" ({load.lanes} lanes" + (f", recycled for {load.duration_s:g} s" if load.duration_s else "") + ")"
        elif load.arrival != "trace":
            desc += f" ({load.rate:g}/s" + (f", {load.plays} plays" if load.plays else "") + ")"
        phases = [k for k in ("snapshot", "warmup", "profile") if getattr(load, k) is not None]
        if load.profile is not None:
            phases[-1] = f"profile {load.profile.duration_s:g} s"
        if phases:
            desc += ", AgentX phases: " + ", ".join(phases)
        if self.speedup != 1.0:
            desc += f", speedup {self.speedup:g}"
        if not load.floors:
            desc += ", no floors"
        return desc
