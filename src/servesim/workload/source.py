"""The one interface the simulator sees: a :class:`WorkloadSource` of requests.

Whatever the workload kind, the simulator gets a *mode* and a stream of requests:

- ``mode == "open"``: requests with ``after is None`` come in non-decreasing ``arrival``
  (seconds); a later session turn comes after the turn it follows and has
  ``after`` = that turn's index, ``delay`` = think time (s) and ``arrival`` = nan (the
  simulator sets it when the previous turn finishes).
- ``mode == "driven"``: an agentic workload (``agentic`` set): the simulation's agentic
  driver (``sim/agentic.py``) sends the graph's nodes as their dependencies fire;
  ``requests()`` is empty.
- ``mode == "closed"``: at most ``concurrency`` requests in flight; yield order is send
  order, every ``arrival`` is 0, warm-up requests (``warmup=True``) come first.

In both modes ``index`` is dense, 0, 1, 2, ... in yield order.  ``requests()`` may be
called more than once and gives the same stream each time (it re-reads the trace or
re-seeds the generator), so nothing needs to be held in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, Sequence

from .config import AgentWorkload, ClosedLoopWorkload, SyntheticWorkload, TraceWorkload
from .recipes import generate_closed_loop
from .request import Request
from .synthetic import generate_synthetic
from .trace import listed_block_ids, read_mooncake


@dataclass(frozen=True)
class WorkloadSource:
    """A replayable stream of requests plus how the client drives them."""

    mode: Literal["open", "closed", "driven"]
    #: In-flight limit of a closed-loop client; None in open mode.
    concurrency: int | None
    #: One line for reports, e.g. "trace conversation.jsonl (speedup 2)".
    description: str
    _factory: Callable[[], Iterator[Request]]
    #: Number of requests when known without reading the stream (None for traces).
    num_requests: int | None = None
    #: Leading warm-up requests (closed loop).
    num_warmup: int = 0
    #: Every block id the requests list, one after another, read more cheaply than the
    #: requests (a trace's ``hash_ids``; it may list more, never fewer); returns None when it
    #: cannot, and then :meth:`listed_block_ids` reads the requests.
    _listed_ids: Callable[[], Sequence[int] | None] | None = None
    #: Where the requests' ids are dense (``0 .. n - 1``: an agentic graph's): every sequence
    #: of ids they list, and ``n``; None when it cannot tell (see :meth:`dense_listed_ids`).
    _dense_ids: Callable[[], tuple[Iterable[Sequence[int]], int] | None] | None = None
    #: What the reader skipped on its latest pass (a trace's ``blank_lines``), for the summary.
    counts: dict[str, int] = field(default_factory=dict)
    #: An agentic trace (``workload/agentic/source.py:AgenticSource``), in mode "driven".
    agentic: Any = None

    def requests(self) -> Iterator[Request]:
        """A fresh iterator over the requests, in yield order (see module docstring)."""
        return self._factory()

    def dense_listed_ids(self) -> tuple[Iterable[Sequence[int]], int] | None:
        """The sequences of block ids the requests list and ``n``, where every id lies in
        ``0 .. n - 1`` (shared ids are then counted in a byte per id, ``workload/sharing.py``);
        None for a workload that does not say."""
        return self._dense_ids() if self._dense_ids is not None else None

    def listed_block_ids(self) -> Iterator[Sequence[int]]:
        """The block ids the requests list (``hash_ids`` and ``output_hash_ids``), in chunks;
        ids of requests the run skips may be among them (``workload/sharing.py``)."""
        if self._listed_ids is not None:
            ids = self._listed_ids()
            if ids is not None:
                yield ids
                return
        for req in self.requests():
            if req.hash_ids:
                yield req.hash_ids
            if req.output_hash_ids:
                yield req.output_hash_ids


def build_source(
    cfg: TraceWorkload | SyntheticWorkload | ClosedLoopWorkload | AgentWorkload,
    seed: int,
    base_dir: Path | None = None,
) -> WorkloadSource:
    """The request source for a validated workload config.

    ``seed`` drives every random draw (synthetic and closed-loop workloads); traces
    ignore it.  A relative trace path is resolved against ``base_dir`` (the folder of
    the config file) when given, else against the working directory.  A missing trace
    file raises :class:`~servesim.errors.WorkloadError` here, before the run starts.
    """
    if isinstance(cfg, TraceWorkload):
        path = Path(cfg.path).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        counts: dict[str, int] = {}
        if cfg.format != "mooncake":
            return agentic_source(cfg, seed, path)
        kwargs = dict(
            block_size=cfg.block_size,
            speedup=cfg.speedup,
            start_ms=cfg.start_ms,
            end_ms=cfg.end_ms,
            limit=cfg.limit,
        )
        read_mooncake(path, **kwargs)  # checks the file exists now
        parts = [f"trace {path.name}"]
        if cfg.speedup != 1.0:
            parts.append(f"speedup {cfg.speedup:g}")
        if cfg.start_ms is not None or cfg.end_ms is not None:
            parts.append(f"window [{cfg.start_ms or 0:g}, {cfg.end_ms if cfg.end_ms is not None else 'end'}] ms")
        if cfg.limit is not None:
            parts.append(f"limit {cfg.limit}")
        return WorkloadSource(
            mode="open",
            concurrency=None,
            description=", ".join(parts),
            _factory=lambda: read_mooncake(path, **kwargs, counts=counts),
            _listed_ids=lambda: listed_block_ids(path),
            counts=counts,
        )
    if isinstance(cfg, SyntheticWorkload):
        a = cfg.arrival
        desc = f"synthetic {cfg.num_requests} requests, {a.process} arrivals at {a.rate:g}/s"
        if a.process == "gamma":
            desc += f" (burstiness {a.burstiness:g})"
        if cfg.prefix is not None:
            desc += f", {cfg.prefix.num_groups} prefix groups of {cfg.prefix.length} tokens"
        if cfg.sessions is not None:
            desc += ", multi-turn sessions"
        return WorkloadSource(
            mode="open",
            concurrency=None,
            description=desc,
            _factory=lambda: generate_synthetic(cfg, seed),
            num_requests=cfg.num_requests,
        )
    if isinstance(cfg, AgentWorkload):
        return agentic_source(cfg, seed)
    if isinstance(cfg, ClosedLoopWorkload):
        n_warmup = cfg.resolved_warmup
        total = n_warmup + cfg.resolved_num_prompts
        desc = (
            f"closed loop {cfg.recipe}, concurrency {cfg.concurrency}, isl {cfg.isl}, "
            f"osl {cfg.osl}, {cfg.resolved_num_prompts} prompts + {n_warmup} warm-up"
        )
        if cfg.recipe == "inferencex_random":
            desc += f", range_ratio {cfg.range_ratio:g}"
        elif cfg.output_spread:
            desc += f", output_spread {cfg.output_spread:g}"
        if cfg.prompt_pool:
            desc += f", {cfg.prompt_pool} distinct prompts reused ({cfg.resolved_pool_sampling})"
        return WorkloadSource(
            mode="closed",
            concurrency=cfg.concurrency,
            description=desc,
            _factory=lambda: generate_closed_loop(cfg, seed),
            num_requests=total,
            num_warmup=n_warmup,
        )
    raise TypeError(f"not a workload config: {type(cfg).__name__}")


def agentic_source(cfg: "TraceWorkload | AgentWorkload", seed: int, path: Path | None = None) -> WorkloadSource:
    """An agentic trace or generated plays: built and checked now (errors before the run), run
    by the simulation's agentic driver (``sim/agentic.py``)."""
    from .agentic.formats import READERS
    from .agentic.generator import generate_agentic
    from .agentic.load import AgenticLoad
    from .agentic.source import AgenticSource

    if isinstance(cfg, AgentWorkload):
        src = AgenticSource(lambda: generate_agentic(cfg, seed), cfg.agentic)
    else:
        bs = cfg.block_size if "block_size" in cfg.model_fields_set else None
        src = AgenticSource(lambda: READERS[cfg.format](path, bs), cfg.agentic or AgenticLoad(), cfg.speedup)
    src.graph()
    return WorkloadSource(mode="driven", concurrency=None, description=src.describe(), _factory=lambda: iter(()),
                          num_requests=src.request_count(), _dense_ids=src.dense_listed_ids,
                          agentic=src)
