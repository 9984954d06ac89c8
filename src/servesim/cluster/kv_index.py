"""The router's picture of every worker's KV cache, built only from KV events.

A KV-aware router (Dynamo's KV router and its ``KvIndexer``, SGLang's cache-aware
router, vLLM's KV events) does not read the workers' caches: it keeps its own index of
which worker holds which prefix, fed by "stored" / "removed" messages that the engines
publish and that reach the router some time later.  :class:`KVIndex` is that index.

Delivery and delay
------------------
Each worker's cache publishes through the callable returned by :meth:`KVIndex.sink`.
Every event carries the virtual time ``t`` at which the cache changed (the event's own
``time`` if the publisher stamped it, else the sink's ``clock()``, else the index's
current time).  The event is buffered and applied — becomes visible to :meth:`overlap` —
once the index is advanced to ``now >= t + delay`` (:meth:`advance`; the KV-aware router
calls it before each decision).  With ``delay = 0`` an event is visible to any decision
taken at or after the instant it was published.

What "a worker holds block b" means
-----------------------------------
*Radix cache events* (SGLang; ``segments`` set) describe one radix node as token ranges
``(block_id, start, end)`` of trace blocks; a node may start or end inside a block, and
nodes are split without events.  The index therefore counts, per worker and per trace
block id, the **number of tokens** of that block that stored-but-not-removed nodes
cover: a "stored" event adds ``end - start`` for each of its segments, a "removed" event
subtracts them.  Splitting a node conserves its tokens, so the count stays exact.  In a
radix tree the cached tokens of one block are always its first ``n`` tokens (a node's
tokens of block ``b`` follow its ancestors' tokens of ``b``, and leaves are evicted
first), so a count ``n`` means "tokens ``[0, n)`` of ``b`` are cached".

The request's block ``k`` (id ``hash_ids[k]``) needs ``min(block_size, input_length -
k * block_size)`` tokens (the last block of a prompt may be partial).  The block is
*held* when the worker's count for its id is at least that.  The **overlap** of a request
with a worker is the number of leading blocks held, walking ``hash_ids`` in order and
stopping at the first block that is not (trace block ids name a whole prefix, as in the
Mooncake traces, so the walk is a prefix match).

*Hashed block events* (vLLM / TensorRT-LLM block pools; ``segments`` is ``None``) carry
chained hashes of full pool blocks of ``hash_block_size`` tokens; the index keeps a
reference count per hash.  For those workers the request's chained hashes are computed
exactly as the engines compute them (:func:`servesim.kvcache.hashing.block_hashes`), the
leading run of held hashes is converted to tokens, and the overlap is the number of whole
trace blocks those tokens cover (plus the last partial block when the whole prompt is
covered).

Events of tiers other than ``tiers`` (by default only ``"gpu"``) are ignored.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable

from servesim.kvcache.events import EventSink, KVEvent
from servesim.workload.request import Request, sequence_units


class KVIndex:
    """Per-worker index of cached prefix blocks, fed by delayed KV events.

    ``delay``: seconds between a cache change and the moment the router sees it.
    ``clock``: returns the current virtual time, used to stamp events that arrive without
    a time (a sink's own ``clock`` takes precedence).  ``hash_block_size``: pool block
    size of engines that publish hashed blocks (vLLM 16 by default).
    """

    def __init__(self, delay: float = 0.0, clock: Callable[[], float] | None = None,
                 hash_block_size: int = 16, tiers: Iterable[str] = ("gpu",)) -> None:
        if delay < 0:
            raise ValueError(f"kv index delay must be >= 0 seconds, got {delay}")
        self.delay = float(delay)
        self.clock = clock
        self.hash_block_size = hash_block_size
        self.tiers = frozenset(tiers)
        #: Time of the latest :meth:`advance`.
        self.now = 0.0
        self._pending: list[tuple[float, int, int, KVEvent]] = []
        self._seq = itertools.count()
        #: worker -> trace block id -> cached tokens of that block (radix events).
        self._tokens: dict[int, dict[int, int]] = {}
        #: worker -> pool block hash -> reference count (hashed-block events).
        self._hashes: dict[int, dict[int, int]] = {}
        #: Events applied, and removals of more than was stored (should stay 0).
        self.applied = 0
        self.anomalies = 0

    # ------------------------------------------------------------------ intake

    def sink(self, worker_id: int, clock: Callable[[], float] | None = None) -> EventSink:
        """The callback to install as ``on_event`` of worker ``worker_id``'s cache."""
        clk = clock if clock is not None else self.clock

        def publish(event: KVEvent) -> None:
            self.publish(worker_id, event, clk)

        return publish

    def publish(self, worker_id: int, event: KVEvent, clock: Callable[[], float] | None = None) -> None:
        """Buffer ``event`` from ``worker_id``; it becomes visible ``delay`` after its time."""
        if event.tier not in self.tiers:
            return
        if event.time is not None:
            t = float(event.time)
        elif clock is not None:
            t = float(clock())
        else:
            t = self.now
        heapq.heappush(self._pending, (t + self.delay, next(self._seq), worker_id, event))

    def advance(self, now: float) -> None:
        """Apply every buffered event whose time plus delay is at or before ``now``."""
        if now > self.now:
            self.now = now
        pending = self._pending
        while pending and pending[0][0] <= now:
            _, _, worker, event = heapq.heappop(pending)
            self._apply(worker, event)

    @property
    def pending(self) -> int:
        """Events published but not yet visible."""
        return len(self._pending)

    def _apply(self, worker: int, event: KVEvent) -> None:
        self.applied += 1
        sign = 1 if event.kind == "stored" else -1
        if event.segments is not None:
            counts = self._tokens.setdefault(worker, {})
            for bid, start, end in event.segments:
                self._bump(counts, bid, sign * (end - start))
        else:
            counts = self._hashes.setdefault(worker, {})
            for h in event.block_hashes:
                self._bump(counts, h, sign)

    def _bump(self, counts: dict[int, int], key: int, delta: int) -> None:
        v = counts.get(key, 0) + delta
        if v > 0:
            counts[key] = v
        else:
            if v < 0:
                self.anomalies += 1
            counts.pop(key, None)

    # ------------------------------------------------------------------ queries

    def held_tokens(self, worker: int, block_id: int) -> int:
        """Tokens of trace block ``block_id`` that ``worker`` is believed to cache."""
        return self._tokens.get(worker, {}).get(block_id, 0)

    def holds_hash(self, worker: int, block_hash: int) -> bool:
        return self._hashes.get(worker, {}).get(block_hash, 0) > 0

    def overlap(self, req: Request, worker: int) -> int:
        """Leading prompt blocks of ``req`` that ``worker`` is believed to hold (see module doc)."""
        best = 0
        counts = self._tokens.get(worker)
        if counts:
            best = _radix_overlap(req, counts)
        hashes = self._hashes.get(worker)
        if hashes:
            best = max(best, self._hashed_overlap(req, hashes))
        return best

    def overlaps(self, req: Request, n_workers: int) -> list[int]:
        """:meth:`overlap` for workers ``0 .. n_workers - 1``."""
        return [self.overlap(req, w) for w in range(n_workers)]

    def _hashed_overlap(self, req: Request, hashes: dict[int, int]) -> int:
        from servesim.kvcache.hashing import block_hashes

        hbs = self.hash_block_size
        units = sequence_units(req, req.input_length)
        hit = 0
        for h in block_hashes(units, hbs, req.input_length, unit_size=req.block_size):
            if hashes.get(h, 0) <= 0:
                break
            hit += 1
        tokens = hit * hbs
        if tokens >= req.input_length:
            return len(req.hash_ids)
        return min(tokens // req.block_size, len(req.hash_ids))


def _radix_overlap(req: Request, counts: dict[int, int]) -> int:
    bs = req.block_size
    left = req.input_length
    n = 0
    for bid in req.hash_ids:
        if left <= 0:
            break
        need = bs if left >= bs else left
        if counts.get(bid, 0) < need:
            break
        n += 1
        left -= bs
    return n
