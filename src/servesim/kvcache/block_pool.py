"""vLLM / TensorRT-LLM-style pool of fixed-size KV blocks with hash-based prefix caching.

(Longer than 600 lines because the pool is one data structure, with its free queue and
hash map, whose invariants are checked together; the compiled pool in ``_lru_core.pyx``
mirrors it method by method.)

Models vLLM v1's ``BlockPool`` (vllm/v1/core/block_pool.py): ``num_blocks`` blocks of
``block_size`` tokens, reference counted; a full block can be *cached* under the chained
hash of its prefix (:mod:`servesim.kvcache.hashing`) so later requests with the same
prefix reuse it.  A block whose ref count drops to zero keeps its hash and waits in the
free queue; it is reused by a prefix hit (leaving the queue) or recycled by an allocation
(losing its hash — that is the eviction).

Eviction order with the default ``lru`` policy is vLLM's exactly: one queue of free blocks
(initially 0..N-1), freed blocks appended at the tail, allocations popped from the head.
Engines free a request's blocks in reverse (:meth:`free_request`) so its tail blocks,
least likely to be shared, are recycled first.  Other policies (``lfu``, ``fifo``,
``belady``) recycle never-cached free blocks first (FIFO), then pick among free cached
blocks by the policy's key, from a lazy heap (:class:`_VictimHeap`): O(log n) per victim
instead of a scan of every free cached block.

Simplification: one block per hash.  If a block is cached under a hash that another block
already holds (two requests computed the same prefix concurrently), it stays uncached.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence

from servesim.kvcache.events import EventSink, KVEvent
from servesim.kvcache.hashing import block_content_ids, block_hashes, chain_block_hashes, unit_chain
from servesim.kvcache.policies import (
    BeladyPolicy,
    EvictionPolicy,
    LRUPolicy,
    NextUseOracle,
    content_group,
    make_policy,
)

__all__ = ["Block", "BlockPool", "block_hashes", "block_content_ids", "block_list", "unit_chain"]


def block_list(ids: Iterable[int] = ()) -> array:
    """A request's block ids as a *block list*: an ``array.array`` of C ints.

    Engines hold each request's blocks in one (``VReq.blocks``, ``TReq.blocks``): the
    compiled pool reads and extends its buffer in place, where a Python list would need an
    int object per block, made when the block is taken and freed with the list.  Both pools
    accept and return block lists where a request's blocks pass (:meth:`BlockPool.chain_take`,
    :meth:`BlockPool.allocate_to`, :meth:`BlockPool.free_request`, :meth:`BlockPool.chain_cache`).
    """
    return array("i", ids)


class Block:
    """One KV block's policy statistics, and a view of its reference count and cached hash.

    The pool keeps reference counts and hashes in two flat lists (:attr:`BlockPool.refs`,
    :attr:`BlockPool.hashes`): the per-block loops of allocation, freeing and prefix
    registration then touch two compact lists instead of one scattered object per block
    (freeing random blocks of a 46k-block pool: ~2.5× faster in a microbenchmark).  ``ref`` and
    ``hash`` here read and write those lists.  The statistics are maintained only under
    non-LRU policies: LRU is the free queue's order itself, and skipping them keeps vLLM's
    default path cheap (an LRU pool creates these objects only when asked for one).
    """

    __slots__ = (
        "idx",
        "pool",
        "last_access",
        "last_seq",
        "access_count",
        "insert_time",
        "insert_seq",
        "block_id",
        "stamp",
    )

    def __init__(self, idx: int, pool: BlockPool) -> None:
        self.idx = idx
        self.pool = pool
        self.last_access = 0.0
        self.last_seq = 0
        self.access_count = 0
        self.insert_time = 0.0
        self.insert_seq = 0
        self.block_id = 0
        #: Stamp of the block's live entry in the victim heap (older entries are stale).
        self.stamp = 0

    @property
    def ref(self) -> int:
        """Requests holding the block (0: free)."""
        return self.pool.refs[self.idx]

    @ref.setter
    def ref(self, value: int) -> None:
        self.pool.refs[self.idx] = value

    @property
    def hash(self) -> int | None:
        """The hash the block is cached under, or None."""
        return self.pool.hashes[self.idx]

    @hash.setter
    def hash(self, value: int | None) -> None:
        self.pool.hashes[self.idx] = value

    def __repr__(self) -> str:
        return f"Block({self.idx}, ref={self.ref}, hash={self.hash})"


class _LazyBlocks(Sequence[Block]):
    """An LRU pool's :class:`Block` objects, created on first access.

    Under LRU the pool itself never needs them (no statistics); they exist for callers
    that inspect a block (invariant checks, tests).  Creating one object per block up front
    cost ~0.1 s per worker of ~46k blocks.
    """

    __slots__ = ("_pool", "_made")

    def __init__(self, pool: BlockPool) -> None:
        self._pool = pool
        self._made: dict[int, Block] = {}

    def __len__(self) -> int:
        return self._pool.num_blocks

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = self._pool.num_blocks
        if not -n <= i < n:
            raise IndexError(i)
        i %= n
        blk = self._made.get(i)
        if blk is None:
            blk = self._made[i] = Block(i, self._pool)
        return blk


class _VictimHeap:
    """Free cached blocks ordered by the policy's key, lazily: the order is exact, the work O(log n).

    Each free cached block has one live entry ``(key, idx, stamp)``; pushing a block again
    (its key changed) leaves the old entry stale, recognised by its stamp.  A popped entry
    is re-keyed before it is trusted; if the key grew (Belady: a request using the block
    arrived) it goes back in.  The order equals a full scan as long as a live entry's key
    never exceeds the block's current key, which holds because:

    * ``lru``/``lfu``/``fifo`` keys are fixed while a block is free;
    * ``belady`` keys grow as time passes *except* in two cases, each re-pushed eagerly:
      the next use recorded at push time has passed (the :attr:`_expiry` heap), and a
      request ended, so its blocks' next use moved from "now" to a later arrival
      (the oracle's end listener, :meth:`on_requests_ended`).
    """

    __slots__ = ("pool", "key", "heap", "oracle", "expiry", "by_content", "stamps")

    #: Stale entries tolerated (beyond 3 per live one) before the heaps are compacted.
    STALE_SLACK = 1024

    def __init__(self, pool: BlockPool, oracle: NextUseOracle | None) -> None:
        self.pool = pool
        self.key = pool.policy.key
        self.heap: list[tuple] = []
        self.stamps = 0
        self.oracle = oracle
        #: Belady only: ``(next use, idx, stamp)`` of entries whose key changes when time reaches it.
        self.expiry: list[tuple[float, int, int]] = []
        #: Belady only: free cached blocks by :func:`content_group` of their trace block id,
    #: to re-key them when a request ends.
        self.by_content: dict[int, set[int]] = {}
        if oracle is not None:
            oracle.subscribe(self.on_requests_ended)

    def push(self, blk: Block) -> None:
        """(Re-)enter a free cached block with its current key."""
        self.stamps += 1
        blk.stamp = s = self.stamps
        k = self.key(blk, self.pool.now)
        heapq.heappush(self.heap, (k, blk.idx, s))
        if self.oracle is not None:
            self.by_content.setdefault(content_group(blk.block_id), set()).add(blk.idx)
            nxt = -k[0]
            if self.pool.now < nxt < math.inf:
                heapq.heappush(self.expiry, (nxt, blk.idx, s))

    def discard(self, blk: Block) -> None:
        """The block left the free cached set (hit or recycled): its entries go stale."""
        blk.stamp = 0
        if self.oracle is not None:
            group = content_group(blk.block_id)
            ids = self.by_content.get(group)
            if ids is not None:
                ids.discard(blk.idx)
                if not ids:
                    del self.by_content[group]

    def on_requests_ended(self, groups: Iterable[int]) -> None:
        """Oracle listener: these blocks' next use may have moved later; re-key ours."""
        blocks = self.pool.blocks
        for group in groups:
            ids = self.by_content.get(group)
            if ids:
                for b in list(ids):
                    self.push(blocks[b])

    def pop_victims(self, n: int) -> list[int]:
        """The ``n`` free cached blocks with the smallest keys (callers check there are n)."""
        pool, key, blocks = self.pool, self.key, self.pool.blocks
        now = pool.now
        expiry = self.expiry
        while expiry and expiry[0][0] <= now:  # next use reached: the key may have dropped
            _, b, s = heapq.heappop(expiry)
            if blocks[b].stamp == s:
                self.push(blocks[b])
        if len(self.heap) > 4 * len(pool._free_cached) + self.STALE_SLACK:
            self.rebuild()
        heap = self.heap
        out: list[int] = []
        while len(out) < n:
            k, b, s = heapq.heappop(heap)
            blk = blocks[b]
            if blk.stamp != s:
                continue  # stale
            cur = key(blk, now)
            if cur != k:
                self.push(blk)
                continue
            self.discard(blk)
            out.append(b)
        return out

    def rebuild(self) -> None:
        """Drop stale entries (bounded memory)."""
        blocks = self.pool.blocks
        self.heap = [e for e in self.heap if blocks[e[1]].stamp == e[2]]
        heapq.heapify(self.heap)
        self.expiry = [e for e in self.expiry if blocks[e[1]].stamp == e[2]]
        heapq.heapify(self.expiry)


class FreeQueue:
    """Free blocks in recycle order (head first), with removal from the middle in O(1).

    vLLM keeps its free blocks in a doubly linked list so that a prefix hit can take a free
    block out of the middle.  Here a deque of block ids with lazy deletion does the same:
    taking a block out (:meth:`remove`) leaves its entry where it is, and an entry is checked
    only when it reaches the head.  An entry of block ``b`` is live iff it is ``b``'s last entry
    in the deque and ``b`` is unreferenced: a block freed, hit and freed again has two entries
    and only the later one counts, exactly as if the first had been unlinked.  Against an
    ``OrderedDict`` this is ~17% faster on allocate + free and takes 8 bytes per entry instead
    of ~100.  Hot loops inline :meth:`popleft` (:meth:`BlockPool._allocate_lru`, the vLLM
    engine's decode replay) or :meth:`append` (:meth:`BlockPool.free`) through :attr:`q`,
    :attr:`entries` and :attr:`live`.
    """

    __slots__ = ("q", "entries", "live", "refs")

    #: Stale entries tolerated (beyond one per live entry) before :meth:`compact`.
    STALE_SLACK = 4096

    def __init__(self, num_blocks: int, refs: list[int]) -> None:
        self.q: deque[int] = deque(range(num_blocks))
        #: Entries (live or stale) of each block in :attr:`q`.
        self.entries: list[int] = [1] * num_blocks
        #: Live entries: the free blocks in the queue.
        self.live = num_blocks
        #: The pool's reference counts (shared list): a referenced block's entries are stale.
        self.refs = refs

    def __len__(self) -> int:
        return self.live

    def __contains__(self, b: int) -> bool:
        return self.refs[b] == 0 and self.entries[b] > 0

    def __iter__(self):
        """The live blocks, head first."""
        return iter(self._live_and_queued()[0])

    def _live_and_queued(self) -> tuple[list[int], set[int]]:
        """The live blocks in order, and every block with an entry; O(entries), not O(blocks).

        Only a block's last entry can be live, so a walk from the tail keeps the first one seen."""
        refs = self.refs
        seen: set[int] = set()
        live: list[int] = []
        for b in reversed(self.q):
            if b not in seen:
                seen.add(b)
                if refs[b] == 0:
                    live.append(b)
        live.reverse()
        return live, seen

    def append(self, b: int) -> None:
        """``b`` (reference count now 0) joins at the tail."""
        self.q.append(b)
        self.entries[b] += 1
        self.live += 1

    def remove(self, b: int) -> None:
        """``b``, a free block the caller has just referenced, leaves the queue (its entry goes stale)."""
        self.live -= 1
        if len(self.q) > 2 * self.live + self.STALE_SLACK:
            self.compact()

    def popleft(self) -> int:
        """The head's block (the caller references it right after)."""
        q, entries, refs = self.q, self.entries, self.refs
        while True:
            b = q.popleft()
            n = entries[b] - 1
            entries[b] = n
            if n == 0 and refs[b] == 0:
                self.live -= 1
                return b

    def compact(self) -> None:
        """Drop the stale entries, keeping the live ones in order (bounded memory).

        In place: hot loops hold :attr:`q`'s and :attr:`entries`' bound methods and lists."""
        live, queued = self._live_and_queued()
        self.q.clear()
        self.q.extend(live)
        entries = self.entries
        for b in queued:
            entries[b] = 0
        for b in live:
            entries[b] = 1


def publish_evictions(pool, removed: list[int]) -> None:
    """Tell ``pool``'s sinks the hashes one allocation evicted: one "removed" event, one write-back."""
    if removed:
        if pool.on_event is not None:
            pool.on_event(KVEvent("removed", tuple(removed), len(removed) * pool.block_size))
        if pool.on_evict is not None:
            pool.on_evict(tuple(removed))


class BlockPool:
    """Fixed pool of ``num_blocks`` blocks with a prefix cache keyed by block hash.

    Set :attr:`now` to the virtual time before operating (policies and events use it).
    Under LRU, :func:`servesim.kvcache.lru_pool.new_block_pool` gives the same pool on the
    compiled core; this class is the reference it is tested against, and serves every policy.
    """

    #: Engines replay decode block events in Python (the compiled pool replays them itself).
    compiled = False

    def __init__(
        self,
        num_blocks: int,
        block_size: int = 16,
        policy: str | EvictionPolicy = "lru",
        oracle: NextUseOracle | None = None,
        on_event: EventSink | None = None,
        enable_caching: bool = True,
    ) -> None:
        if num_blocks < 0 or block_size < 1:
            raise ValueError(f"need num_blocks >= 0 and block_size >= 1, got {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.policy = policy if isinstance(policy, EvictionPolicy) else make_policy(policy, oracle)
        self._lru = type(self.policy) is LRUPolicy
        self.on_event = on_event
        #: Called with the hashes of cached blocks an allocation recycles (a host tier
        #: writes them back); independent of ``on_event``, which publishers replace.
        self.on_evict: Callable[[tuple[int, ...]], None] | None = None
        self.enable_caching = enable_caching
        self.now = 0.0
        self._seq = 0
        #: Reference count and cached hash (None: not cached) of every block.
        self.refs: list[int] = [0] * num_blocks
        self.hashes: list[int | None] = [None] * num_blocks
        #: Policy statistics per block; under LRU, created on demand (see :class:`Block`).
        self.blocks: Sequence[Block] = (_LazyBlocks(self) if self._lru
                                        else [Block(i, self) for i in range(num_blocks)])
        #: Free blocks in recycle order (head first).  Under non-LRU policies only the
        #: never-cached ones; free cached blocks then live in ``_free_cached``.
        self._free = FreeQueue(num_blocks, self.refs)
        self._free_cached: set[int] = set()
        self._victims = None if self._lru else _VictimHeap(
            self, oracle if type(self.policy) is BeladyPolicy else None)
        self._hash_to_block: dict[int, int] = {}

    # ------------------------------------------------------------------ counters

    @property
    def num_free_blocks(self) -> int:
        """Blocks with ref count 0 (cached or not): what an allocation can obtain."""
        return len(self._free) + len(self._free_cached)

    @property
    def num_used_blocks(self) -> int:
        """Blocks referenced by at least one request."""
        return self.num_blocks - self.num_free_blocks

    @property
    def num_cached_blocks(self) -> int:
        """Blocks currently holding a hash (in use or free)."""
        return len(self._hash_to_block)

    @property
    def usage(self) -> float:
        """Fraction of blocks in use (vLLM's ``kv_cache_usage``)."""
        return self.num_used_blocks / self.num_blocks if self.num_blocks else 0.0

    # ------------------------------------------------------------------ prefix lookup

    # -- the same operations on the hashes of a request's unit chain (kvcache/hashing.py) --------
    def chain_prefix(self, chain: list[int], unit_size: int, n: int) -> int:
        """:meth:`find_cached_prefix` of the hashes of blocks ``0..n-1`` from a unit chain."""
        return self.find_cached_prefix(chain_block_hashes(chain, self.block_size, n, unit_size=unit_size))

    def chain_count_free(self, chain: list[int], unit_size: int, n: int) -> int:
        """:meth:`count_free_hits` of blocks ``0..n-1``'s hashes."""
        return self.count_free_hits(chain_block_hashes(chain, self.block_size, n, unit_size=unit_size))

    def chain_take(self, chain: list[int], unit_size: int, n: int) -> array:
        """:meth:`take_cached` of blocks ``0..n-1``'s hashes, as a new block list."""
        return block_list(self.take_cached(chain_block_hashes(chain, self.block_size, n, unit_size=unit_size)))

    def chain_take_within(self, chain: list[int], unit_size: int, n: int, need: int) -> array | None:
        """:meth:`chain_take` of blocks ``0..n-1`` if ``need`` fresh blocks then still fit in the
        free queue (a hit on a free block uses one up), else None, taking nothing."""
        free_hits = self.chain_count_free(chain, unit_size, n) if n else 0
        if need + free_hits > self.num_free_blocks:
            return None
        return self.chain_take(chain, unit_size, n) if n else block_list()

    # A request that waits is looked up at every pass until admitted: the compiled LRU pool
    # remembers its last lookup on it (kvcache/_lru_core.pyx:LRUCore.owner_prefix); this
    # reference walks the chain each time, with the same results.
    def owner_prefix(self, owner, unit_size: int, n: int) -> int:
        """:meth:`chain_prefix` of a request's unit chain (``owner``: a ``BlockOwner``)."""
        return self.chain_prefix(owner.chain, unit_size, n)

    def prefix_cuts(self, owner, unit_size: int, hit: int, k: int):
        """Under LRU, how the next ``k`` allocations (the free queue's first ``k`` blocks) cut the
        request's cached prefix ``0..hit-1`` (``owner``: a ``BlockOwner`` whose chain reaches it):
        ``(free, cuts)``, ``free`` the prefix's blocks that are free and ``cuts`` a list of
        ``(i, q, free_q)``: the ``i``-th allocation takes prefix block ``q``, below every earlier
        cut, leaving a prefix of ``q`` blocks of which ``free_q`` are free."""
        if not self._lru:
            raise ValueError("prefix_cuts: the free queue is the allocation order under LRU only")
        table = self._hash_to_block
        blocks = [table[h] for h in chain_block_hashes(owner.chain, self.block_size, hit, unit_size=unit_size)]
        pos = {b: q for q, b in enumerate(blocks)}
        refs = self.refs
        pf = [0]
        for b in blocks:
            pf.append(pf[-1] + (1 if refs[b] == 0 else 0))
        cur = hit
        cuts = []
        for seen, b in enumerate(self._free):
            if seen >= k or cur <= 0:
                break
            q = pos.get(b)
            if q is not None and q < cur:
                cur = q
                cuts.append((seen, q, pf[q]))
        return pf[hit], cuts

    def owner_take_within(self, owner, unit_size: int, n: int, need: int) -> array | None:
        """:meth:`chain_take_within` of a request's unit chain; None at once when ``need`` alone
        exceeds the free blocks."""
        if need > self.num_free_blocks:
            return None
        return self.chain_take_within(owner.chain, unit_size, n, need)

    def chain_cache(self, blocks: Sequence[int], chain: list[int], unit_size: int, start: int, stop: int,
                    content_ids: Sequence[int] | None = None) -> int:
        """:meth:`cache_full_blocks` of ``blocks[start:stop]`` under blocks ``start..stop-1``'s hashes."""
        hashes = chain_block_hashes(chain, self.block_size, stop, unit_size=unit_size, start_block=start)
        return self.cache_full_blocks(blocks[start:stop], hashes, content_ids)

    def find_cached_prefix(self, hashes: Sequence[int]) -> int:
        """Number of leading ``hashes`` present in the cache (no side effects)."""
        table = self._hash_to_block
        n = 0
        for h in hashes:
            if h not in table:
                break
            n += 1
        return n

    def get_cached_block(self, h: int) -> int | None:
        """The block cached under hash ``h``, if any."""
        return self._hash_to_block.get(h)

    def count_free_hits(self, hashes: Iterable[int]) -> int:
        """How many of the cached ``hashes`` sit on free blocks (a hit on them uses up a free block)."""
        table, refs = self._hash_to_block, self.refs
        return sum(1 for h in hashes if refs[table[h]] == 0)

    def take_cached(self, hashes: Iterable[int]) -> list[int]:
        """Reference the cached blocks of ``hashes`` (all must be cached) for a request.

        A hit on a free block takes it out of the free queue; every hit counts as an
        access for the policy.  Returns the block indices in order.
        """
        self._seq += 1
        table, refs = self._hash_to_block, self.refs
        out = [table[h] for h in hashes]
        if self._lru:  # no statistics: the free queue's order is the whole policy
            free = self._free
            for b in out:
                ref = refs[b]
                refs[b] = ref + 1
                if ref == 0:
                    free.remove(b)
            return out
        seq, now = self._seq, self.now
        for b in out:
            blk = self.blocks[b]
            if refs[b] == 0:
                self._free_cached.discard(b)
                self._victims.discard(blk)
            refs[b] += 1
            blk.last_access = now
            blk.last_seq = seq
            blk.access_count += 1
        return out

    # ------------------------------------------------------------------ allocate / free

    @property
    def lru_fast_path(self) -> bool:
        """LRU with no event sink: allocation only pops the free queue (no statistics, no
        events), so one call for ``n`` blocks equals ``n`` calls for one, and ``now`` is unused."""
        return self._lru and self.on_event is None and self.on_evict is None

    def allocate(self, n: int) -> list[int] | None:
        """``n`` fresh blocks (ref count 1), recycling free cached blocks if needed; None if short."""
        if n > self.num_free_blocks:
            return None
        if n <= 0:
            return []
        free = self._free
        if self.lru_fast_path:
            return self._allocate_lru(n)
        if self._lru:
            out = [free.popleft() for _ in range(n)]
        else:
            k = min(n, len(free))
            out = [free.popleft() for _ in range(k)]
            if k < n:
                victims = self._victims.pop_victims(n - k)
                self._free_cached.difference_update(victims)
                out.extend(victims)
        removed: list[int] = []
        table, refs, hashes = self._hash_to_block, self.refs, self.hashes
        for b in out:
            h = hashes[b]
            if h is not None:
                del table[h]
                removed.append(h)
                hashes[b] = None
            refs[b] = 1
        publish_evictions(self, removed)
        return out

    def allocate_to(self, blocks: array, n: int) -> bool:
        """:meth:`allocate` appending the blocks to the block list ``blocks``; False (nothing
        taken) if short."""
        got = self.allocate(n)
        if got is None:
            return False
        blocks.extend(got)
        return True

    def _allocate_lru(self, n: int) -> list[int]:
        """:meth:`allocate` under LRU with no event sink: one pass over the blocks taken."""
        free = self._free
        popleft, entries = free.q.popleft, free.entries
        refs, hashes = self.refs, self.hashes
        table = self._hash_to_block
        out: list[int] = []
        take = out.append
        for _ in range(n):  # FreeQueue.popleft, inlined
            b = popleft()
            e = entries[b] - 1
            entries[b] = e
            while e or refs[b]:  # a stale entry
                b = popleft()
                e = entries[b] - 1
                entries[b] = e
            h = hashes[b]
            if h is not None:  # recycling a cached block evicts it
                del table[h]
                hashes[b] = None
            refs[b] = 1
            take(b)
        free.live -= n
        return out

    def free(self, blocks: Iterable[int]) -> None:
        """Drop one reference to each block, in the given order; unreferenced ones join the free queue."""
        refs = self.refs
        if self._lru:  # hot path: the queue order is the whole policy, no statistics
            free = self._free
            append, entries = free.q.append, free.entries
            n_freed = 0
            try:
                for b in blocks:
                    ref = refs[b] - 1
                    if ref < 0:
                        raise RuntimeError(f"freeing {self.blocks[b]!r}, which is not in use")
                    refs[b] = ref
                    if ref == 0:  # FreeQueue.append, inlined
                        append(b)
                        entries[b] += 1
                        n_freed += 1
            finally:  # the count stays true if a bad block id stops the loop
                free.live += n_freed
            return
        self._seq += 1
        seq, now = self._seq, self.now
        all_blocks, hashes = self.blocks, self.hashes
        for b in blocks:
            ref = refs[b] - 1
            if ref < 0:
                raise RuntimeError(f"freeing {all_blocks[b]!r}, which is not in use")
            refs[b] = ref
            if ref == 0:
                blk = all_blocks[b]
                blk.last_access = now
                blk.last_seq = seq
                if hashes[b] is None:
                    self._free.append(b)
                else:
                    self._free_cached.add(b)
                    self._victims.push(blk)

    def free_request(self, blocks: Sequence[int]) -> None:
        """Free a request's blocks tail first, so its last blocks are recycled first (vLLM)."""
        self.free(reversed(blocks))

    def cache_full_blocks(
        self, blocks: Sequence[int], hashes: Sequence[int], content_ids: Sequence[int] | None = None
    ) -> int:
        """Register full blocks under their hashes (pairwise); returns how many were newly cached.

        Blocks already cached are skipped, and so are hashes another block already holds.
        ``content_ids``: the trace block id of each block (for ``belady``); defaults to the hash.
        """
        if not self.enable_caching:
            return 0
        self._seq += 1
        seq, now = self._seq, self.now
        table = self._hash_to_block
        stored: list[int] = []
        refs, held = self.refs, self.hashes
        if self._lru:  # hot path: LRU needs no per-block statistics
            for b, h in zip(blocks, hashes):
                if held[b] is not None or h in table:
                    continue
                if refs[b] <= 0:
                    raise RuntimeError(f"caching {self.blocks[b]!r}, which is not in use")
                held[b] = h
                table[h] = b
                stored.append(h)
            if stored and self.on_event is not None:
                self.on_event(KVEvent("stored", tuple(stored), len(stored) * self.block_size))
            return len(stored)
        for i, (b, h) in enumerate(zip(blocks, hashes)):
            blk = self.blocks[b]
            if held[b] is not None or h in table:
                continue
            if refs[b] <= 0:
                raise RuntimeError(f"caching {blk!r}, which is not in use")
            held[b] = h
            table[h] = b
            blk.insert_time = now
            blk.insert_seq = seq
            blk.last_access = now
            blk.last_seq = seq
            blk.access_count = 1
            blk.block_id = content_ids[i] if content_ids is not None else h
            stored.append(h)
        if stored and self.on_event is not None:
            self.on_event(KVEvent("stored", tuple(stored), len(stored) * self.block_size))
        return len(stored)

    # ------------------------------------------------------------------ views and checks

    def free_order(self) -> list[int]:
        """The free blocks, next recycled first (under non-LRU policies, the never-cached ones)."""
        return list(self._free)

    def cached_map(self) -> dict[int, int]:
        """``{hash: block}`` of the cached blocks."""
        return dict(self._hash_to_block)

    def check_invariants(self) -> None:
        """Raise AssertionError unless refs, free structures and the hash map agree.

        Every block is free (ref 0, in exactly one free structure) or in use (ref > 0);
        free + used == num_blocks; each hash entry points at a block holding that hash and
        each hashed block is in the map.
        """
        n_free = 0
        assert len(self.refs) == len(self.hashes) == self.num_blocks
        for b, (ref, h) in enumerate(zip(self.refs, self.hashes)):
            assert ref >= 0, b
            in_q = b in self._free
            in_c = b in self._free_cached
            assert not (in_q and in_c), b
            if ref == 0:
                assert in_q or in_c, f"block {b} unreferenced but not free"
                n_free += 1
            else:
                assert not (in_q or in_c), f"block {b} referenced but free"
            if h is not None:
                assert self._hash_to_block.get(h) == b, b
            if in_c:
                assert h is not None and not self._lru, b
            if in_q and not self._lru:
                assert h is None, b
        for h, b in self._hash_to_block.items():
            assert self.hashes[b] == h, (h, b)
        fq = self._free  # the free queue: entry counts match the deque, live ones are the free blocks
        counts = Counter(fq.q)
        assert all(fq.entries[b] == counts.get(b, 0) for b in range(self.num_blocks))
        queued = list(fq)
        assert len(queued) == fq.live
        assert set(queued) == {b for b in range(self.num_blocks) if b in fq}
        assert n_free == self.num_free_blocks
        assert n_free + sum(1 for ref in self.refs if ref > 0) == self.num_blocks
