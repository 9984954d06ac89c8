"""An agentic trace as a workload source: the graph (read once, checked before the run) and
its play starts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .formats import READERS
from .graph import AgenticGraph, PlayStart
from .load import AgenticLoad, play_starts


@dataclass
class AgenticSource:
    """What the simulation's agentic driver needs: the graph, the starts, the release options."""

    path: Path
    format: str
    #: The config's block size when the user set it (a header's must then agree), else None.
    block_size: int | None
    load: AgenticLoad
    speedup: float
    _graph: AgenticGraph | None = field(default=None, repr=False)

    def graph(self) -> AgenticGraph:
        """The lowered graph (read on first use; a bad trace raises WorkloadError)."""
        if self._graph is None:
            self._graph = READERS[self.format](self.path, self.block_size)
        return self._graph

    def starts(self, seed: int) -> list[PlayStart]:
        return play_starts(self.graph(), self.load, self.speedup, seed)

    @property
    def recycles(self) -> bool:
        """Whether plays may run more than once (copies with fresh block ids the graph does not list)."""
        ld = self.load
        n = len(self.graph().plays)
        return (ld.arrival == "lanes" and ld.duration_s is not None) or (ld.plays is not None and ld.plays > n)

    def listed_block_ids(self) -> list[int] | None:
        """Every block id the nodes list (prompt and answer blocks); None when plays recycle."""
        if self.recycles:
            return None
        out: list[int] = []
        for node in self.graph().nodes:
            out.extend(node.hash_ids)
            out.extend(node.output_hash_ids)
        return out
