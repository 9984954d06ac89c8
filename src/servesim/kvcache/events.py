"""KV events: the record a cache publishes when it stores or drops KV, for routers to consume.

A KV-aware router (SGLang's cache-aware router, Dynamo's KV router, vLLM's KV events)
keeps an approximate index of which worker holds which prefix blocks, fed by a stream of
"stored" / "removed" messages.  The caches here emit one :class:`KVEvent` per stored or
removed radix node / hashed block through an optional callback; the worker that owns the
cache adds its worker id and the virtual time (caches know neither) before publishing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

EventKind = Literal["stored", "removed"]

#: A segment of one trace block: tokens ``[start, end)`` of block ``block_id``.
Segment = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class KVEvent:
    """One change in what a worker's KV cache holds.

    ``block_hashes``: for the hashed block pool, the chained hashes of the full blocks
    stored/removed; for the radix cache, the trace block ids the node's tokens belong to
    (a node may start or end inside a block, see ``segments``).  ``tokens``: how many
    tokens of KV the change covers.  ``tier``: "gpu" or "host".  ``time`` and
    ``worker`` are filled in by the caller (via :meth:`stamped`).
    """

    kind: EventKind
    block_hashes: tuple[int, ...]
    tokens: int
    tier: str = "gpu"
    time: float | None = None
    worker: int | None = None
    #: Radix cache only: the exact token ranges ``(block_id, start, end)`` of the node.
    segments: tuple[Segment, ...] | None = None

    def stamped(self, time: float, worker: int) -> KVEvent:
        """The same event with the publishing worker and virtual time filled in."""
        return KVEvent(self.kind, self.block_hashes, self.tokens, self.tier, time, worker, self.segments)


#: Callback a cache calls for each event; ``None`` disables events (no cost).
EventSink = Callable[[KVEvent], None]
