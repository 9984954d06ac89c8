"""A host-memory (CPU DRAM) KV tier below the GPU cache: SGLang HiCache / vLLM offloading / LMCache-like.

Blocks evicted from the GPU are written back to host memory instead of being lost; a later
request whose prefix misses on the GPU but hits on the host loads those blocks over PCIe
instead of recomputing them.  The tier is indexed by the chained block hashes of
:mod:`servesim.kvcache.hashing` (``block_size`` tokens per host block), LRU within host.
It only answers counts and bytes; the engine prices the load (``PassPlan.host_load_s``, over
the link of :mod:`servesim.engines.host`).

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

    @property
    def size_tokens(self) -> int:
        """Tokens held in host memory."""
        return len(self._lru) * self.block_size

    def check_invariants(self) -> None:
        """Host blocks within capacity."""
        assert len(self._lru) <= self.capacity_blocks, (len(self._lru), self.capacity_blocks)

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

    def match(self, hashes: Sequence[int], start_block: int = 0, touch: bool = True) -> int:
        """Blocks ``hashes[start_block:]`` present on host as a contiguous run.

        ``start_block`` is where the GPU match ended: host hits extend the GPU prefix.
        With ``touch`` the hits count as used (most recent); engines look up without
        touching and :meth:`touch` what they actually load.
        """
        lru = self._lru
        n = 0
        for h in hashes[start_block:]:
            if h not in lru:
                break
            if touch:
                lru.move_to_end(h)
            n += 1
        return n

    def touch(self, hashes: Iterable[int]) -> None:
        """Mark blocks as just used (they are being loaded to the GPU); absent ones are skipped."""
        lru = self._lru
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)

    def load_bytes(self, n_blocks: int) -> float:
        """Bytes moved host → GPU to load ``n_blocks`` blocks."""
        return n_blocks * self.block_size * self.bytes_per_token


class HostRadix:
    """Host tier of a radix cache (SGLang HiCache): a second radix tree in host memory.

    When the GPU tree evicts a leaf, the whole path root → leaf is written here
    (:meth:`store`; the ancestors are usually still on the GPU, and SGLang's default
    write-through policy keeps them on host too).  Host capacity is ``capacity`` tokens;
    least recently used host leaves go first.  :meth:`match` gives how many leading tokens
    of a sequence the host holds; the engine loads those beyond its GPU match.  Events
    (``on_event``) carry tier ``"host"``.
    """

    def __init__(self, capacity: int, page_size: int = 1, on_event: EventSink | None = None) -> None:
        from servesim.kvcache.radix_cache import RadixCache

        self.tree = RadixCache(capacity, page_size=page_size, policy="lru", on_event=on_event, tier="host")
        self.capacity = capacity
        self.stored_tokens = 0  # tokens written host-ward (new to the host)

    @property
    def size(self) -> int:
        """Tokens held in host memory."""
        return self.tree.total_size

    @property
    def on_event(self) -> EventSink | None:
        return self.tree.on_event

    @on_event.setter
    def on_event(self, sink: EventSink | None) -> None:
        self.tree.on_event = sink

    def store(self, segs: list, now: float = 0.0) -> int:
        """Write the canonical, page-aligned path ``segs`` to host; returns the tokens new to the host.

        A path longer than the host keeps its first ``capacity`` tokens.
        """
        from servesim.kvcache.segments import segments_tokens, split_segments

        tree = self.tree
        tree.now = now
        total = segments_tokens(segs)
        if total > self.capacity:
            keep = self.capacity - self.capacity % tree.page_size
            if keep <= 0:
                return 0
            segs, _ = split_segments(segs, keep)
            total = keep
        m = tree.match_segments(segs)
        new = total - m.tokens
        if new <= 0:
            return 0
        tree.inc_lock_ref(m.node)  # the shared part must survive the eviction below
        short = new - tree.pool.free_tokens
        if short > 0:
            tree.evict(short)
        ok = tree.pool.alloc(new)
        assert ok, "host tier: no room after evicting every other host leaf"
        present = tree.insert_segments(segs)
        assert present == m.tokens, (present, m.tokens)
        tree.dec_lock_ref(m.node)
        self.stored_tokens += new
        return new

    def match(self, units, n_tokens: int | None = None, now: float = 0.0) -> int:
        """Leading tokens of ``units`` (first ``n_tokens``) held on host, page aligned; touched as used."""
        self.tree.now = now
        return self.tree.match_prefix(units, n_tokens).tokens

    def check_invariants(self) -> None:
        """Host tokens within capacity, nothing locked, and the tree's own invariants."""
        tree = self.tree
        assert tree.total_size <= self.capacity, (tree.total_size, self.capacity)
        assert tree.protected_size == 0, "host tier: a host node stayed locked"
        assert tree.pool.private_tokens == 0
        tree.check_invariants()
