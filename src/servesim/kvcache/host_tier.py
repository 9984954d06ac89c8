"""A host-memory (CPU DRAM) KV tier below the GPU cache: SGLang HiCache / vLLM offloading / LMCache-like.

Blocks evicted from the GPU are written back to host memory instead of being lost; a later
request whose prefix misses on the GPU but hits on the host loads those blocks over PCIe
instead of recomputing them.  The tier is indexed by the chained block hashes of
:mod:`servesim.kvcache.hashing` (``block_size`` tokens per host block), LRU within host.
It only answers counts and bytes; the engine prices the load (``PassPlan.host_load_bytes``).

Feeding it from a :class:`~servesim.kvcache.block_pool.BlockPool`: pass
``on_event=tier.on_gpu_event`` (or call it from the worker's own sink) so "removed" GPU
events store their hashes here.  For the radix cache the engine stores the hashes of the
evicted prefix itself (the radix event carries segments, not chained hashes).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from servesim.kvcache.events import EventSink, KVEvent


class HostTier:
    """LRU set of block hashes held in host memory, ``capacity_blocks`` at most."""

    def __init__(
        self,
        capacity_blocks: int,
        block_size: int,
        bytes_per_token: float,
        on_event: EventSink | None = None,
    ) -> None:
        self.capacity_blocks = capacity_blocks
        self.block_size = block_size
        self.bytes_per_token = bytes_per_token
        self.on_event = on_event
        self._lru: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, h: int) -> bool:
        return h in self._lru

    def store(self, hashes: Iterable[int]) -> None:
        """Write blocks back to host (most recent at the tail), evicting host LRU blocks."""
        lru = self._lru
        stored: list[int] = []
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)
            else:
                lru[h] = None
                stored.append(h)
        removed: list[int] = []
        while len(lru) > self.capacity_blocks:
            removed.append(lru.popitem(last=False)[0])
        if self.on_event is not None:
            if stored:
                self.on_event(KVEvent("stored", tuple(stored), len(stored) * self.block_size, "host"))
            if removed:
                self.on_event(KVEvent("removed", tuple(removed), len(removed) * self.block_size, "host"))

    def on_gpu_event(self, event: KVEvent) -> None:
        """Event sink for a GPU cache: blocks the GPU removes are kept here."""
        if event.kind == "removed" and event.tier == "gpu":
            self.store(event.block_hashes)

    def match(self, hashes: Sequence[int], start_block: int = 0) -> int:
        """Blocks ``hashes[start_block:]`` present on host as a contiguous run (touched as used).

        ``start_block`` is where the GPU match ended: host hits extend the GPU prefix.
        """
        lru = self._lru
        n = 0
        for h in hashes[start_block:]:
            if h not in lru:
                break
            lru.move_to_end(h)
            n += 1
        return n

    def load_bytes(self, n_blocks: int) -> float:
        """Bytes moved host → GPU to load ``n_blocks`` blocks."""
        return n_blocks * self.block_size * self.bytes_per_token
