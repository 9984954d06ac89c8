"""SGLang-style radix cache over trace-block segments, with token-pool accounting.

Models SGLang's ``RadixCache`` (python/sglang/srt/mem_cache/radix_cache.py): a radix tree
whose edges hold runs of tokens; four verbs — match, insert, evict, lock/unlock.  Here a
node's key reads as a list of :data:`Segment` ``(block_id, start, end)`` instead of token
ids, so every operation costs per segment/node, never per token; a node an engine inserts
from a request holds the request's run itself (:class:`RadixNode`), no segment per block.
Children are indexed by the block id of their first segment: all children of a node start
at the same position of the block grid, so two children with the same first id would share
a token and must be one node.

Request life cycle (how an engine drives it, as SGLang's scheduler does)::

    m = cache.match_prefix(units, n_tokens=prompt_len - 1)   # page aligned
    cache.inc_lock_ref(m.node)                               # protect the prefix
    if not cache.alloc(prompt_len - m.tokens): ...           # evicts if short
    ... prefill chunks: m = cache.cache_unfinished(units, done, m.tokens, m.node)
    ... decode: cache.alloc(1) per token (or per page)
    cache.cache_finished(units, seq_len, m.tokens, m.node)   # insert, free dups, unlock

With ``page_size > 1`` matches and inserted keys are truncated to page multiples and the
unaligned tail of a finished request is freed, as in SGLang's paged radix cache.

The module is longer than 600 lines because the tree is one compiled extension
(``radix_cache.pxd``): its walks, inserts, locks and eviction call each other as C
methods, and a walk that reads a request's block ids (:meth:`RadixCache.match_request`)
reads them through C functions of this module.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence

from servesim.kvcache.events import EventSink, KVEvent, Segment
from servesim.kvcache.lazy_heap import new_lazy_heap
from servesim.kvcache.policies import (
    EvictionPolicy,
    FIFOPolicy,
    LFUPolicy,
    LRUPolicy,
    NextUseOracle,
    make_policy,
)
from servesim.kvcache.segments import (
    advance,
    common_prefix,
    segments_tokens,
    canonical_segments,
    split_segments,
    units_to_segments,
)
from servesim.kvcache.token_pool import TokenPool
from servesim.workload.request import Request, output_block_id, sequence_segments

Units = Sequence[tuple[int, int]]


class RadixNode:
    """One edge of the tree: a run of tokens (its key) and the subtree below it.

    The key is held one of two ways.  A node made from a request's tokens (the engines'
    inserts, :meth:`RadixCache.insert_request_after`) keeps the request and where its run
    starts in the request's sequence (``req``, ``start``; the run is ``ntok`` tokens): an
    insert then builds no segment per block and an eviction frees none, where agent
    contexts run to thousands of blocks.  A node made from segments (the units and
    segments API) keeps them (``segs``).  :attr:`key` reads either as segments.
    """

    __slots__ = (
        "uid",
        "segs",
        "req",
        "start",
        "ntok",
        "children",
        "parent",
        "lock_ref",
        "last_access",
        "last_seq",
        "access_count",
        "insert_time",
        "insert_seq",
        "block_id",
    )

    def __init__(self, uid: int, segs: list[Segment] | None, parent: RadixNode | None, now: float, seq: int,
                 ntok: int = -1, req: Request | None = None, start: int = 0) -> None:
        self.uid = uid
        #: The key's segments; None when the key is a run of ``req``'s sequence.
        self.segs = segs
        #: The request whose tokens ``[start, start + ntok)`` are the key (None: ``segs`` are).
        self.req = req
        self.start = start
        #: Tokens of the key; a caller that knows them passes them (counting walks every segment).
        self.ntok = ntok if ntok >= 0 else segments_tokens(segs)  # type: ignore[arg-type]
        self.children: dict[int, RadixNode] = {}
        self.parent = parent
        self.lock_ref = 0
        self.last_access = now
        self.last_seq = seq
        self.access_count = 1
        self.insert_time = now
        self.insert_seq = seq
        if req is not None:
            self.block_id = _request_block(req, start // req.block_size)
        else:
            self.block_id = segs[0][0] if segs else 0

    @property
    def key(self) -> list[Segment]:
        """The key as segments ``(block_id, start, end)`` (built here for a request's run)."""
        if self.req is None:
            return self.segs  # type: ignore[return-value]
        return sequence_segments(self.req, self.start, self.start + self.ntok)

    def __repr__(self) -> str:
        return f"RadixNode(uid={self.uid}, key={self.key}, lock_ref={self.lock_ref}, children={len(self.children)})"


class MatchResult:
    """A cached prefix: ``tokens`` leading tokens, ending exactly at ``node`` (root if none).

    (A plain class, not a dataclass: kvcache/radix_cache.pxd types it.)
    """

    __slots__ = ("tokens", "node")

    def __init__(self, tokens: int, node: RadixNode) -> None:
        self.tokens = tokens
        self.node = node

    def __repr__(self) -> str:
        return f"MatchResult(tokens={self.tokens}, node={self.node.uid})"


class RadixCache:
    """Radix tree of cached prefixes plus the token pool it shares with running requests.

    ``capacity``: KV tokens (or a :class:`TokenPool` to share).  ``policy``: eviction
    order of unlocked leaves, a name from :mod:`servesim.kvcache.policies` or a policy
    object (``oracle`` needed for ``belady``).  ``disable``: SGLang's
    ``--disable-radix-cache`` — nothing matches, nothing is kept.  ``on_event``: called
    with a :class:`KVEvent` for each node stored or removed (of tier ``tier``).
    ``on_evict``: called with the canonical segments of the whole path root → leaf of
    each leaf evicted (a host tier writes them back).  Set :attr:`now` to the virtual time
    before operating so access statistics carry it.
    """

    def __init__(
        self,
        capacity: int | TokenPool,
        page_size: int = 1,
        policy: str | EvictionPolicy = "lru",
        oracle: NextUseOracle | None = None,
        disable: bool = False,
        on_event: EventSink | None = None,
        tier: str = "gpu",
    ) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.pool = capacity if isinstance(capacity, TokenPool) else TokenPool(capacity)
        self.page_size = page_size
        self.policy = policy if isinstance(policy, EvictionPolicy) else make_policy(policy, oracle)
        self.disable = disable
        self.on_event = on_event
        self.tier = tier
        self.on_evict: Callable[[list[Segment]], None] | None = None
        self.now = 0.0
        self._seq = 0
        self._uids = itertools.count(1)
        self.root = RadixNode(0, [], None, 0.0, 0)
        self.root.lock_ref = 1  # the root is never evictable
        self.evictable_size = 0
        self.protected_size = 0
        self._evictable_leaves: set[RadixNode] = set()
        # Time-independent policies whose keys only grow (lru, lfu, fifo) keep one lazy heap
        # of nodes by (key, uid) across calls (kvcache/lazy_heap.py): an entry is pushed
        # whenever a node becomes an evictable leaf; entries of nodes that are no longer
        # evictable leaves are dropped when popped, and an entry whose key is out of date is
        # pushed again with the current key.  Since keys never decrease, the first current entry popped is the
        # true minimum, so eviction order equals a heap rebuilt from all leaves each call.
        self._lazy = type(self.policy) in (LRUPolicy, LFUPolicy, FIFOPolicy)
        #: Which of the three the lazy heap orders by (:meth:`_lazy_push`); 0 when not lazy.
        self._lazy_kind = {LRUPolicy: 1, LFUPolicy: 2, FIFOPolicy: 3}.get(type(self.policy), 0)
        self._heap = new_lazy_heap()

    def _add_leaf(self, node: RadixNode) -> None:
        self._evictable_leaves.add(node)
        if self._lazy:
            if len(self._heap) > 2 * len(self._evictable_leaves) + 1024:
                self._rebuild_heap()
            else:
                self._lazy_push(node)

    def _lazy_push(self, node: RadixNode) -> None:
        """Push ``node`` keyed by its policy's key, read from the node itself as an integer pair:
        LRU ``(last_seq, 0)``, LFU ``(access_count, last_seq)``, FIFO ``(insert_seq, 0)``; the
        order of :mod:`servesim.kvcache.policies`' keys without a Python method call per entry
        (``tests/kvcache/test_radix_cache.py`` checks they agree)."""
        kind = self._lazy_kind
        if kind == 1:
            self._heap.push(node.last_seq, 0, node.uid, node)
        elif kind == 2:
            self._heap.push(node.access_count, node.last_seq, node.uid, node)
        else:
            self._heap.push(node.insert_seq, 0, node.uid, node)

    def _lazy_current(self, node: RadixNode, k1: int, k2: int) -> bool:
        """Whether a popped entry's key ``(k1, k2)`` is the node's current one."""
        kind = self._lazy_kind
        if kind == 1:
            return node.last_seq == k1
        if kind == 2:
            return node.access_count == k1 and node.last_seq == k2
        return node.insert_seq == k1

    def _rebuild_heap(self) -> None:
        """Drop every stale entry: the heap then holds each evictable leaf once.  The pop
        order is that of the keys alone, so it is the same however the entries arrive."""
        self._heap.clear()
        for node in self._evictable_leaves:
            self._lazy_push(node)

    # ------------------------------------------------------------------ counters

    @property
    def total_size(self) -> int:
        """Tokens held by the tree (evictable + protected)."""
        return self.evictable_size + self.protected_size

    @property
    def free_tokens(self) -> int:
        """Unallocated tokens in the pool."""
        return self.pool.free_tokens

    @property
    def eviction_ignores_time(self) -> bool:
        """Whether the eviction order depends only on the tree (LRU, LFU, FIFO), not on
        :attr:`now` (Belady's next use does)."""
        return self._lazy

    @property
    def available_tokens(self) -> int:
        """Tokens an allocation could obtain: free plus evictable (SGLang's admission budget)."""
        return self.pool.free_tokens + self.evictable_size

    # ------------------------------------------------------------------ match / insert

    def _aligned_segments(self, units: Units, n_tokens: int | None) -> tuple[list[Segment], int]:
        segs = units_to_segments(units, n_tokens)
        total = segments_tokens(segs)
        aligned = total - total % self.page_size
        if aligned != total:
            segs = units_to_segments(units, aligned)
        return segs, aligned

    def _walk(self, segs: list[Segment]) -> tuple[int, RadixNode, int, int]:
        """Follow ``segs`` down the tree, touching and splitting; return (tokens, node, i, s)."""
        self._seq += 1
        return self._descend(self.root, segs, 0, 0, 0)

    def _touch_path(self, node: RadixNode) -> None:
        """One new access stamp on every node from ``node`` up to the root (excluded): what a
        walk down that path gives it."""
        self._seq += 1
        seq, now, root = self._seq, self.now, self.root
        while node is not root:
            node.last_access = now
            node.last_seq = seq
            node.access_count += 1
            node = node.parent  # type: ignore[assignment]

    def _descend(self, node: RadixNode, segs: list[Segment], i: int, s: int, total: int) -> tuple[int, RadixNode, int, int]:
        """The walk from ``node``, ``total`` tokens down, at input position (segment ``i``,
        token ``s``), stamping with the current sequence number."""
        seq, now, page = self._seq, self.now, self.page_size
        n = len(segs)
        while i < n:
            child = node.children.get(segs[i][0])
            if child is None:
                break
            m, i2, s2 = _key_common_prefix(child, segs, i, s)
            if page > 1 and m % page:
                m -= m % page
                i2, s2 = advance(segs, i, s, m)
            if m == 0:
                break
            child.last_access = now
            child.last_seq = seq
            child.access_count += 1
            total += m
            i, s = i2, s2
            if m < child.ntok:
                node = self._split(child, m)
                break
            node = child
        return total, node, i, s

    def _split(self, child: RadixNode, m: int) -> RadixNode:
        """Cut ``child``'s key after ``m`` tokens; the new upper node is returned."""
        parent = child.parent
        assert parent is not None
        if child.req is None:
            head, tail = split_segments(child.segs, m)
            new = RadixNode(next(self._uids), head, parent, child.insert_time, child.insert_seq, m)
            child.segs = tail
            child.block_id = tail[0][0]
        else:  # a run of a request's sequence: two shorter runs of it
            new = RadixNode(next(self._uids), None, parent, child.insert_time, child.insert_seq, m,
                            child.req, child.start)
            child.start += m
            child.block_id = _request_block(child.req, child.start // child.req.block_size)
        new.lock_ref = child.lock_ref
        new.last_access = child.last_access
        new.last_seq = child.last_seq
        new.access_count = child.access_count
        parent.children[new.block_id] = new
        child.ntok -= m
        child.parent = new
        new.children[child.block_id] = child
        return new

    def match_prefix(self, units: Units, n_tokens: int | None = None) -> MatchResult:
        """Longest cached, page-aligned prefix of the first ``n_tokens`` of ``units``.

        Updates access statistics along the path and splits the last node so that the
        returned node ends exactly at the match (as SGLang does), ready to be locked.
        """
        if self.disable:
            return MatchResult(0, self.root)
        segs, _ = self._aligned_segments(units, n_tokens)
        tokens, node, _, _ = self._walk(segs)
        return MatchResult(tokens, node)

    def match_segments(self, segs: list[Segment]) -> MatchResult:
        """:meth:`match_prefix` of a canonical, page-aligned segment list (a path read back)."""
        if self.disable:
            return MatchResult(0, self.root)
        tokens, node, _, _ = self._walk(segs)
        return MatchResult(tokens, node)

    def match_request(self, req: Request, stop: int) -> MatchResult:
        """:meth:`match_segments` of ``sequence_segments(req, 0, stop)``, reading the request's
        block ids as the walk reaches them.

        An engine matches a waiting request each time it tries to admit it; building the
        segment list first made every try cost a tuple per page of the prompt (the larger
        part of an SGLang admission on agent contexts, whose prompts run to thousands of
        pages).  This walk costs what it compares: the segments of the nodes it goes
        through.  Same stamps, splits and result as the walk of the built list; a position
        is a token index, (segment ``i``, token ``s``) of that list being ``i * block_size + s``.
        """
        if self.disable:
            return MatchResult(0, self.root)
        self._seq += 1
        pos, node = self._descend_request(self.root, req, 0, stop)
        return MatchResult(pos, node)

    def _descend_request(self, node: RadixNode, req: Request, pos: int, stop: int) -> tuple[int, RadixNode]:
        """:meth:`_descend` reading the input from the request's tokens ``[pos, stop)``: the walk
        from ``node`` (``pos`` tokens down), stamping with the current sequence number.
        Returns where it stopped: the position and the node ending there."""
        seq, now, page = self._seq, self.now, self.page_size
        bs = req.block_size
        while pos < stop:
            child = node.children.get(_request_block(req, pos // bs))
            if child is None:
                break
            if child.req is None:
                m = _request_common_prefix(child.segs, req, pos, stop)
            else:
                m = _run_common_prefix(child.req, child.start + child.ntok, req, pos, stop)
            if page > 1 and m % page:
                m -= m % page
            if m == 0:
                break
            child.last_access = now
            child.last_seq = seq
            child.access_count += 1
            pos += m
            if m < child.ntok:
                node = self._split(child, m)
                break
            node = child
        return pos, node

    def path_segments(self, node: RadixNode) -> list[Segment]:
        """The tokens root → ``node`` (inclusive) as canonical segments."""
        keys = []
        root = self.root
        while node is not root and node is not None:
            keys.append(node.key)
            node = node.parent  # type: ignore[assignment]
        return canonical_segments([seg for key in reversed(keys) for seg in key])

    def insert(self, units: Units, n_tokens: int | None = None) -> int:
        """Put the page-aligned first ``n_tokens`` of ``units`` in the tree.

        Returns how many leading tokens were already present: the caller holds duplicate
        KV for those beyond its own locked prefix and must :meth:`free` them.  The new
        tokens move from request-private to tree ownership in the pool.
        """
        if self.disable:
            return 0
        segs, _ = self._aligned_segments(units, n_tokens)
        return self._insert_segments(segs)[0]

    def insert_segments(self, segs: list[Segment]) -> int:
        """:meth:`insert` of a canonical, page-aligned segment list."""
        return self._insert_segments(segs)[0]

    def insert_and_match(self, units: Units, n_tokens: int | None = None) -> tuple[int, MatchResult]:
        """:meth:`insert`, then :meth:`match_prefix` of the same tokens, walking the tree once.

        After the insertion the whole path is in the tree and its last node ends exactly at
        its end (a leaf made for it, or a node the walk split there), so the match is that
        node; what the match's own walk would change — one more access stamp on every node of
        the path — is applied going up through the parents.
        """
        if self.disable:
            return 0, MatchResult(0, self.root)
        segs, aligned = self._aligned_segments(units, n_tokens)
        present, end = self._insert_segments(segs)
        self._touch_path(end)
        return present, MatchResult(aligned, end)

    def insert_after(self, segs: list[Segment], below: RadixNode, prefix: int, end: int = -1) -> int:
        """:meth:`insert` of the tokens after a locked node, given only those tokens.

        ``below`` is the node the caller has locked, ending ``prefix`` tokens into its
        sequence; ``segs`` are the sequence's tokens from there to a page-aligned end
        (``workload.request.sequence_segments(req, prefix, end)``).  Same result as
        :meth:`insert` of the whole sequence, without building or walking its first
        ``prefix`` tokens again.  ``end``: where ``segs`` end in the sequence (``prefix`` plus
        their tokens), when the caller knows it; -1: counted from ``segs``.
        """
        if self.disable:
            return 0
        return self._insert_after(segs, below, prefix, end)[0]

    def insert_after_and_match(self, segs: list[Segment], below: RadixNode, prefix: int,
                               end: int = -1) -> tuple[int, MatchResult]:
        """:meth:`insert_and_match` of the tokens after a locked node (arguments as for
        :meth:`insert_after`)."""
        if self.disable:
            return 0, MatchResult(0, self.root)
        if end < 0:
            end = prefix + segments_tokens(segs)
        present, last = self._insert_after(segs, below, prefix, end)
        self._touch_path(last)
        return present, MatchResult(end, last)

    def insert_request_after(self, req: Request, below: RadixNode, prefix: int, end: int) -> int:
        """:meth:`insert_after` of the request's tokens ``[prefix, end)`` (``end`` page aligned),
        read from the request as the walk reaches them: the same tree, stamps and result as
        inserting ``sequence_segments(req, prefix, end)``, and a new leaf keeps the request's
        run instead of a segment per block (:class:`RadixNode`)."""
        if self.disable:
            return 0
        return self._insert_request_after(req, below, prefix, end)[0]

    def insert_request_after_and_match(self, req: Request, below: RadixNode, prefix: int,
                                       end: int) -> tuple[int, MatchResult]:
        """:meth:`insert_after_and_match` of the request's tokens ``[prefix, end)`` (as for
        :meth:`insert_request_after`)."""
        if self.disable:
            return 0, MatchResult(0, self.root)
        present, last = self._insert_request_after(req, below, prefix, end)
        self._touch_path(last)
        return present, MatchResult(end, last)

    def _insert_request_after(self, req: Request, below: RadixNode, prefix: int, end: int) -> tuple[int, RadixNode]:
        """:meth:`_insert_after` with the input read from the request: the path to ``below``
        stamped, the walk on from it, a leaf holding the request's run for the rest."""
        self._touch_path(below)
        pos, node = self._descend_request(below, req, prefix, end)
        if pos < end:
            leaf = RadixNode(next(self._uids), None, node, self.now, self._seq, end - pos, req, pos)
            self._attach_leaf(node, leaf)
            return pos, leaf
        return pos, node

    def _insert_segments(self, segs: list[Segment]) -> tuple[int, RadixNode]:
        """Insert ``segs`` walking from the root; returns the tokens already present and the
        node ending at ``segs``' end."""
        prefix, node, i, s = self._walk(segs)
        return self._add_rest(segs, prefix, node, i, s)

    def _insert_after(self, segs: list[Segment], below: RadixNode, prefix: int, end: int = -1) -> tuple[int, RadixNode]:
        """:meth:`_insert_segments` of a sequence whose first ``prefix`` tokens are the path
        root → ``below`` (a locked node, so in the tree) and whose later tokens are ``segs``.

        That path is stamped as a walk from the root would stamp it (whole nodes, never
        split: a key ends where ``below`` does), and the walk goes on from ``below``.  It
        reads positions as (segment, token within its block), starting at the first
        segment's first token: inside its block when ``prefix`` is.  ``end``: as for
        :meth:`insert_after`.
        """
        self._touch_path(below)
        total, node, i, s = self._descend(below, segs, 0, segs[0][1] if segs else 0, prefix)
        return self._add_rest(segs, total, node, i, s, end)

    def _add_rest(self, segs: list[Segment], prefix: int, node: RadixNode, i: int, s: int,
                  end: int = -1) -> tuple[int, RadixNode]:
        """After a walk of ``segs`` that matched ``prefix`` tokens, ending at ``node`` and input
        position (segment ``i``, token ``s``): a new leaf under ``node`` for the rest, if any.
        Returns ``prefix`` and the node ending at ``segs``' end (``end`` tokens into the
        sequence when the caller knows it: the leaf then holds ``end - prefix`` tokens without
        counting them)."""
        if i < len(segs):
            rest = [(segs[i][0], s, segs[i][2]), *segs[i + 1 :]]
            leaf = RadixNode(next(self._uids), rest, node, self.now, self._seq, end - prefix if end >= 0 else -1)
            self._attach_leaf(node, leaf)
            return prefix, leaf
        return prefix, node

    def _attach_leaf(self, node: RadixNode, leaf: RadixNode) -> None:
        """Hang a new leaf under ``node``; its tokens move from the request to the tree."""
        if not node.children and node.lock_ref == 0:
            self._evictable_leaves.discard(node)
        node.children[leaf.block_id] = leaf
        self._add_leaf(leaf)
        self.evictable_size += leaf.ntok
        self.pool.adopt(leaf.ntok)
        if self.on_event is not None:
            self.on_event(self._event("stored", leaf))

    def _event(self, kind: str, node: RadixNode) -> KVEvent:
        ids = tuple(dict.fromkeys(seg[0] for seg in node.key))
        return KVEvent(kind, ids, node.ntok, self.tier, None, None, tuple(node.key))  # type: ignore[arg-type]

    # ------------------------------------------------------------------ locks

    def inc_lock_ref(self, node: RadixNode) -> int:
        """Protect the path root→``node`` from eviction; returns tokens newly protected."""
        self._check_attached(node)
        delta = 0
        root = self.root
        while node is not root:
            if node.lock_ref == 0:
                self.evictable_size -= node.ntok
                self.protected_size += node.ntok
                delta += node.ntok
                if not node.children:
                    self._evictable_leaves.discard(node)
            node.lock_ref += 1
            node = node.parent  # type: ignore[assignment]
        return delta

    def dec_lock_ref(self, node: RadixNode) -> int:
        """Undo one :meth:`inc_lock_ref`; returns tokens that became evictable."""
        self._check_attached(node)
        delta = 0
        root = self.root
        while node is not root:
            if node.lock_ref <= 0:
                raise RuntimeError(f"dec_lock_ref below zero on {node!r}")
            if node.lock_ref == 1:
                self.evictable_size += node.ntok
                self.protected_size -= node.ntok
                delta += node.ntok
                if not node.children:
                    self._add_leaf(node)
            node.lock_ref -= 1
            node = node.parent  # type: ignore[assignment]
        return delta

    def _check_attached(self, node: RadixNode) -> None:
        if node is not self.root and (node.parent is None or node.parent.children.get(node.block_id) is not node):
            raise RuntimeError(f"{node!r} is no longer in the tree (evicted while unlocked?)")

    # ------------------------------------------------------------------ eviction

    def evict(self, num_tokens: int) -> int:
        """Evict unlocked leaves in policy order until ``num_tokens`` are freed.

        Whole nodes are evicted (the last one may overshoot); a parent whose last child
        went becomes a candidate itself.  Returns the tokens freed (less than asked only
        when nothing evictable is left).
        """
        if num_tokens <= 0 or not self._evictable_leaves:
            return 0
        if self._lazy:
            return self._evict_lazy(num_tokens)
        key, now = self.policy.key, self.now
        heap = [(key(n, now), n.uid, n) for n in self._evictable_leaves]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, node = heapq.heappop(heap)
            freed += node.ntok
            parent = self._remove_leaf(node)
            if parent is not None:
                heapq.heappush(heap, (key(parent, now), parent.uid, parent))
        return freed

    def _evict_lazy(self, num_tokens: int) -> int:
        heap, leaves = self._heap, self._evictable_leaves
        freed = 0
        while freed < num_tokens and leaves:
            node = heap.pop()
            if node not in leaves:
                continue
            if not self._lazy_current(node, heap.k1, heap.k2):
                self._lazy_push(node)
                continue
            freed += node.ntok
            parent = self._remove_leaf(node)
            if parent is not None:
                self._lazy_push(parent)
        return freed

    def _remove_leaf(self, node: RadixNode) -> RadixNode | None:
        """Evict one unlocked leaf; returns its parent if that became an evictable leaf."""
        parent = node.parent
        assert parent is not None and node.lock_ref == 0 and not node.children
        if self.on_evict is not None:
            self.on_evict(self.path_segments(node))
        del parent.children[node.block_id]
        node.parent = None
        leaves = self._evictable_leaves
        leaves.discard(node)
        self.evictable_size -= node.ntok
        self.pool.release_cached(node.ntok)
        if self.on_event is not None:
            self.on_event(self._event("removed", node))
        if parent is not self.root and not parent.children and parent.lock_ref == 0:
            leaves.add(parent)
            return parent
        return None

    # ------------------------------------------------------------------ pool front-end

    def alloc(self, n: int, evict: bool = True) -> bool:
        """Allocate ``n`` private tokens for a request, evicting cache first if short."""
        short = n - self.pool.free_tokens
        if short > 0 and evict:
            self.evict(short)
        return self.pool.alloc(n)

    def free(self, n: int) -> None:
        """Return ``n`` request-private tokens (e.g. a retracted request's KV)."""
        self.pool.free(n)

    def cache_finished(self, units: Units, n_tokens: int, prefix_tokens: int, node: RadixNode) -> None:
        """A request holding KV for its first ``n_tokens`` finished.

        ``prefix_tokens``/``node``: the match it locked.  Inserts its sequence, frees the
        KV it duplicated (inserted meanwhile by others) and the unaligned tail, unlocks.
        Afterwards the request holds no private tokens.
        """
        private = n_tokens - prefix_tokens
        if self.disable:
            self.pool.free(private)
            return
        aligned = n_tokens - n_tokens % self.page_size
        present = self.insert(units, aligned)
        adopted = aligned - present
        self.pool.free(private - adopted)
        self.dec_lock_ref(node)

    def cache_unfinished(self, units: Units, n_tokens: int, prefix_tokens: int, node: RadixNode) -> MatchResult:
        """A running request computed KV for its first ``n_tokens``: share it now.

        Used after each chunked-prefill pass.  Inserts, frees duplicates, moves the lock
        from ``node`` to the new end of the cached prefix, and returns that new match;
        the request's private tokens are then ``n_tokens - result.tokens``.
        """
        if self.disable:
            return MatchResult(prefix_tokens, node)
        aligned = n_tokens - n_tokens % self.page_size
        present = self.insert(units, aligned)
        if present > prefix_tokens:
            self.pool.free(present - prefix_tokens)
        m = self.match_prefix(units, aligned)
        self.inc_lock_ref(m.node)
        self.dec_lock_ref(node)
        return m

    # ------------------------------------------------------------------ checks

    def check_invariants(self) -> None:
        """Raise AssertionError if any structural or accounting invariant is broken.

        free + tree + private == capacity; lock refs >= 0 and never larger below than
        above; evictable + protected == tree tokens; children of a node start at one grid
        position with distinct block ids; no empty non-root node; page-aligned nodes.
        """
        self.pool.check()
        tree = evictable = protected = 0
        leaves: set[RadixNode] = set()
        stack = [self.root]
        while stack:
            node = stack.pop()
            starts = set()
            for bid, child in node.children.items():
                assert child.parent is node, child
                assert child.key and child.ntok > 0, f"empty node {child!r}"
                assert child.key[0][0] == bid == child.block_id, child
                assert child.ntok == segments_tokens(child.key), child
                assert all(s < e for _, s, e in child.key), child
                assert child.ntok % self.page_size == 0, f"unaligned node {child!r}"
                assert 0 <= child.lock_ref <= node.lock_ref or node is self.root, child
                assert child.lock_ref >= 0
                starts.add(child.key[0][1])
                tree += child.ntok
                if child.lock_ref == 0:
                    evictable += child.ntok
                    if not child.children:
                        leaves.add(child)
                else:
                    protected += child.ntok
                stack.append(child)
            assert len(starts) <= 1, f"children of {node!r} start at different offsets {starts}"
        assert evictable == self.evictable_size, (evictable, self.evictable_size)
        assert protected == self.protected_size, (protected, self.protected_size)
        assert tree == self.pool.cached_tokens, (tree, self.pool.cached_tokens)
        assert leaves == self._evictable_leaves, "evictable-leaf index out of date"


def _request_block(req: Request, k: int) -> int:
    """Block ``k``'s id in the request's sequence: ``workload.request``'s rule (prompt ids, then
    answer ids, then ids of this request alone), here so that the compiled walk reads it in C."""
    ids = req.hash_ids
    n_ids = len(ids)
    if k < n_ids:
        return ids[k]
    out = req.output_hash_ids
    if k - n_ids < len(out):
        return out[k - n_ids]
    return output_block_id(req.index, k - n_ids)


def _request_common_prefix(key: list[Segment], req: Request, pos: int, stop: int) -> int:
    """Tokens shared by ``key`` and the request's tokens ``[pos, stop)``: ``segments.common_prefix``
    of ``key`` and ``sequence_segments(req, 0, stop)`` read from position ``pos``, without the list."""
    bs = req.block_size
    m = 0
    for kb, ks, ke in key:
        if pos >= stop:
            break
        k = pos // bs
        base = k * bs
        s = pos - base
        e = stop - base  # the end of the input's segment of block k
        if e > bs:
            e = bs
        if ks != s or kb != _request_block(req, k):
            break
        end = ke if ke < e else e
        m += end - s
        pos = base + end
        if end == e and end < ke:  # the input ends inside this key segment
            break
    return m


def _key_common_prefix(node: RadixNode, segs: list[Segment], i: int, s: int) -> tuple[int, int, int]:
    """``segments.common_prefix`` of the node's key and the input ``segs`` from (segment ``i``,
    token ``s``), reading a request's run in place (no segment list built)."""
    if node.req is None:
        return common_prefix(node.segs, segs, i, s)
    req = node.req
    bs = req.block_size
    pos, stop = node.start, node.start + node.ntok
    m = 0
    n = len(segs)
    while pos < stop:  # the key's segment of block k is [ks, ke) of it, as sequence_segments cuts it
        if i >= n:
            break
        k = pos // bs
        ks = pos - k * bs
        ke = stop - k * bs
        if ke > bs:
            ke = bs
        bid, _, e = segs[i]
        if _request_block(req, k) != bid or ks != s:
            break
        end = ke if ke < e else e
        m += end - s
        if end == e:
            i += 1
            s = 0
            if end < ke:  # the input ends inside this key segment
                break
        else:
            s = end
        pos = k * bs + ke
    return m, i, s


def _run_common_prefix(owner: Request, key_end: int, req: Request, pos: int, stop: int) -> int:
    """Tokens shared by a node holding ``owner``'s run ``[pos, key_end)`` and the request's
    tokens ``[pos, stop)``: both are runs of sequences on one block grid at the same depth,
    so they agree block by block up to the first block whose ids differ (what
    ``_request_common_prefix`` finds segment by segment)."""
    bs = req.block_size
    if owner.block_size != bs:  # two grids: compare segment by segment
        return _request_common_prefix(sequence_segments(owner, pos, key_end), req, pos, stop)
    end = key_end if key_end < stop else stop
    if end <= pos:
        return 0
    if owner is req:  # a request meeting its own run (re-admitted after a retraction): all of it
        return end - pos
    k = pos // bs
    last = (end - 1) // bs
    a, b = owner.hash_ids, req.hash_ids
    if type(a) is tuple and type(b) is tuple:  # the prompts' blocks: one loop over the tuples
        k = _same_ids(a, b, k, min(last + 1, len(a), len(b)))
    while k <= last:
        a = _request_block(owner, k)
        b = _request_block(req, k)
        if a is not b and a != b:
            break
        k += 1
    if k > last:
        return end - pos
    return k * bs - pos if k * bs > pos else 0


def _same_ids(a: tuple, b: tuple, k: int, stop: int) -> int:
    """The first position in ``[k, stop)`` where the two tuples of block ids differ (``stop``
    where none does): equal ids are mostly the same int objects (a trace's ids are shared),
    so most comparisons are of two pointers."""
    while k < stop:
        x = a[k]
        y = b[k]
        if x is not y and x != y:
            return k
        k += 1
    return stop
