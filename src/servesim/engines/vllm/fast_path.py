"""vLLM's decode fast path, beside the reference scheduler (``scheduler.py``).

A running request whose next pass is one sampled token is a *plain decode*.  In a large
batch most running requests are, pass after pass, and walking them one by one through
the scheduler's running loop is most of a pass's cost.  This module keeps the leading
plain decodes as arrays instead (:class:`_DecodePrefix`) and schedules and commits them
with a few array operations; it also commits runs of identical decode-only passes at once
(:meth:`VLLMDecodeFastPath.complete_stretch`), replaying their block events in bulk.

Every shortcut here must give exactly what the reference scheduler's per-request paths
give (``tests/engines/vllm/test_vllm_fast_paths.py`` runs both, pass by pass).  The
reference scheduling itself — the running loop, admission, preemption, the commit of a
general pass — is ``scheduler.py:VLLMEngine``, which extends :class:`VLLMDecodeFastPath`.
Both modules are compiled from source; ``fast_path.pxd`` types this one and
``scheduler.pxd`` cimports it, so the calls between the two stay C calls.

The module is longer than 600 lines because the decode prefix, the stretch bounds (including
the joined stretches of a blocked waiting request, :meth:`VLLMDecodeFastPath.decode_stretch_plan`)
and their block replay all read the engine's typed state: as one compiled class their calls
and attribute reads are C; split across modules they would go through Python.
"""

from __future__ import annotations

import numpy as np

from servesim.compiled import compiled_module
from servesim.engines.blockkv.arithmetic import decode_event_buckets, stretch_block_events
from servesim.engines.blockkv.manager import BlockKVEngine
from servesim.kvcache.block_owner import BlockOwner
from servesim.kvcache.hashing import chain_block_hash
from servesim.perf.plan import PassPlan
from servesim.workload.request import Request

#: The decode block replay in C on the compiled pool's core (``_decode_replay.pyx``), or None;
#: its Python reference is :meth:`VLLMDecodeFastPath._replay_lru` on the Python pool.
_core = compiled_module("engines.vllm._decode_replay")  # bound at import: servesim/compiled.py's rule


class VReq(BlockOwner):
    """Engine-side state of one request; its blocks, unit chain and registered blocks are
    the :class:`~servesim.kvcache.block_owner.BlockOwner` fields the compiled pool reads.

    (Plain classes here, not dataclasses: engines/vllm/fast_path.pxd types them when the module is
    compiled.)
    """

    __slots__ = ("max_new", "generated", "computed", "sched", "admitted_once", "num_tokens", "arrived")

    def __init__(self, req: Request, max_new: int, num_tokens: int = 0, arrived: float = 0.0) -> None:
        self._own(req)  # BlockOwner's fields
        self.max_new = max_new
        self.generated = 0
        #: Tokens whose KV exists (vLLM's num_computed_tokens), committed at pass end.
        self.computed = 0
        #: Tokens being computed in the pass in flight.
        self.sched = 0
        self.admitted_once = False
        #: Prompt plus sampled tokens (vLLM's num_tokens), kept equal to input + generated.
        self.num_tokens = num_tokens
        #: When it reached the engine (async scheduling admits what arrived before its view).
        self.arrived = arrived

    def __repr__(self) -> str:
        return (f"VReq(index={self.req.index}, max_new={self.max_new}, generated={self.generated}, "
                f"computed={self.computed}, sched={self.sched}, blocks={len(self.blocks)}, "
                f"n_cached={self.n_cached})")


class _DecodePrefix:
    """The leading running requests that are plain decodes, as arrays (see ``VLLMEngine.schedule``).

    ``reqs`` is ``running[:len(reqs)]``; each has ``computed == num_tokens - 1`` and
    ``generated > 0``, and, as every running request between passes, holds
    ``ceil(computed / block_size)`` blocks with ``computed // block_size`` of them
    registered (``check_invariants`` asserts both).  So its next pass is one token, and it
    needs a block exactly when ``computed % block_size == 0`` and registers one when
    ``(computed + 1) % block_size == 0``: a pass can schedule all of them with a few array
    operations instead of a Python iteration per request.

    The rows are the truth for these requests: with the bulk block replay (see
    ``VLLMEngine._lazy``) a commit advances the rows and leaves the requests' own
    ``computed``, ``generated``, ``num_tokens`` and ``sched`` behind, until
    :meth:`write_back` brings them up to date (when a request leaves the prefix, finishes, or
    the prefix is dropped).  That keeps a pass's cost off the number of decoding requests.
    """

    __slots__ = ("reqs", "rows", "left_min", "_computed", "_idx")

    def __init__(self, reqs: list[VReq], rows: np.ndarray, left_min: int) -> None:
        self.reqs = reqs
        #: Rows: each request's computed tokens, its ``max_new - generated``, its recorder row
        #: (one array, so that advancing, filtering and extending are one operation each).
        self.rows = rows
        #: ``left.min()`` (a large number when empty).
        self.left_min = left_min
        #: The views :attr:`computed` and :attr:`idx`, made on first use (each is read a few
        #: times per pass, and a view costs about as much as a small numpy operation).
        self._computed = None
        self._idx = None

    # ``arith``: the engine's decode arithmetic (engines/blockkv/arithmetic.py:decode_arithmetic).
    @classmethod
    def of(cls, reqs: list[VReq], rows: np.ndarray, arith) -> _DecodePrefix:
        return cls(reqs, rows, arith.left_min(rows))

    @property
    def computed(self) -> np.ndarray:
        if self._computed is None:
            self._computed = self.rows[0]
        return self._computed

    @property
    def left(self) -> np.ndarray:
        return self.rows[1]

    @property
    def idx(self) -> np.ndarray:
        if self._idx is None:
            self._idx = self.rows[2]
        return self._idx

    def advanced(self, k: int, arith) -> _DecodePrefix:
        """The same requests after ``k`` more decode passes, less those that finished."""
        rows, left_min, reqs = arith.advance_rows(self.rows, k, self.left_min, self.reqs)
        return _DecodePrefix(reqs, rows, left_min)

    def write_back(self, k: int = 0, only: list[int] | None = None) -> list[VReq]:
        """Write the rows, ``k`` passes on, into the requests (all, or those at positions
        ``only``); returns the requests written."""
        reqs = self.reqs
        rows = self.rows
        if only is None:
            pos = range(len(reqs))
            computed = rows[0].tolist()
            left = rows[1].tolist()
        else:  # usually a few finishing requests: their own entries, not whole rows as lists
            pos = only
            computed = [rows.item(0, j) for j in only]
            left = [rows.item(1, j) for j in only]
        out = []
        for j, c, lf in zip(pos, computed, left):
            vr = reqs[j]
            vr.computed = c + k
            g = vr.max_new - lf + k
            vr.generated = g
            vr.num_tokens = vr.req.input_length + g
            vr.sched = 0
            out.append(vr)
        return out

    def extended(self, more: list[VReq], arith) -> _DecodePrefix:
        """These requests followed by the plain decodes ``more``."""
        left = [vr.max_new - vr.generated for vr in more]
        rows = arith.extend_rows(self.rows, [vr.computed for vr in more], left, [vr.req.index for vr in more])
        return _DecodePrefix(self.reqs + more, rows, min(self.left_min, min(left)))


class _VBatch:
    """A scheduled pass's requests and what its commit needs."""

    __slots__ = ("reqs", "decode_only", "preempted", "idx", "computed", "left_min", "prefix")

    def __init__(self, reqs: list[VReq], decode_only: bool, preempted: bool, idx: np.ndarray | None = None) -> None:
        self.reqs = reqs
        self.decode_only = decode_only
        self.preempted = preempted
        #: Request indices of ``reqs`` (the recorder's rows), built once per pass.
        self.idx = idx
        #: For a decode-only pass: each request's computed tokens, and min(max_new - generated).
        self.computed: np.ndarray | None = None
        self.left_min = 0
        #: The pass's leading decodes (``reqs[:len(prefix.reqs)]``), in their state before the
        #: pass; the commit advances it into the next pass's :class:`_DecodePrefix`.
        self.prefix: _DecodePrefix | None = None


class VLLMDecodeFastPath(BlockKVEngine):
    """The vLLM engine's decode fast path: its state and the methods that use it.

    Not an engine by itself: :class:`~servesim.engines.vllm.scheduler.VLLMEngine` extends
    it with the reference scheduling, which sets the queues and limits read here
    (``running``, ``waiting``, ``ready``, ``budget``, ``max_seqs``) and provides
    :meth:`_allocate` and :meth:`_finish_done`.
    """

    #: Fewest leading decodes worth tracking as arrays: below this the running loop is
    #: cheaper than the array operations' fixed cost (measured crossover ~20 requests).
    FAST_DECODES_MIN = 16

    def _init_fast_path(self) -> None:
        """The fast path's state for an engine with nothing scheduled yet."""
        self._last: _VBatch | None = None
        #: Leading running requests known to be plain decodes (set at each commit).
        self._prefix: _DecodePrefix | None = None
        #: The prefix whose rows are the truth for its requests (``running[:len(reqs)]``):
        #: with the bulk block replay their own fields lag behind until written back (see
        #: :class:`_DecodePrefix`); otherwise they are written back at every commit.
        self._lazy: _DecodePrefix | None = None
        #: Whether a scheduled pass awaits its commit (the lazy requests' ``sched`` is then 1).
        self._in_flight = False
        #: :attr:`FAST_DECODES_MIN` for this engine (tests vary it per engine).
        self.fast_decodes_min = self.FAST_DECODES_MIN

    # -- the reference scheduler's (scheduler.py) ------------------------------------------
    def _allocate(self, vr: VReq, n: int) -> bool:
        """Blocks for ``n`` more tokens of a running request; False when the pool is short."""
        raise NotImplementedError

    def _finish_done(self, reqs: list[VReq], end: float) -> None:
        """Finish the requests among ``reqs`` that reached their last token."""
        raise NotImplementedError

    # -- scheduling the leading decodes ------------------------------------------------------
    def _batch_arrays(self, scheduled: list[VReq], pre: _DecodePrefix | None, pre_ctx: np.ndarray | None,
                      ctx: list[int], lefts: list[int],
                      lead: int) -> tuple[np.ndarray, np.ndarray, _DecodePrefix | None]:
        """The pass's recorder rows and decode contexts, and its ``lead`` leading decodes as a prefix
        (None when there are too few to be worth it).

        ``ctx`` and ``lefts`` are the running loop's decodes after those of ``pre`` (whose
        contexts are ``pre_ctx``).
        """
        m = len(pre.reqs) if pre is not None else 0
        reuse = pre is not None and lead == m  # the known decodes lead the pass: their prefix as it is
        idx, dctx, rows = self._arith.batch_arrays(pre.rows if pre is not None else None, pre_ctx,
                                                   [vr.req.index for vr in scheduled[m:]], ctx, lefts, lead,
                                                   not reuse and lead >= self.fast_decodes_min)
        if reuse:
            return idx, dctx, pre
        if rows is None:
            return idx, dctx, None
        return idx, dctx, _DecodePrefix.of(scheduled[:lead], rows, self._arith)

    def _fast_decodes(self, budget: int, dt: int) -> tuple[_DecodePrefix | None, np.ndarray | None]:
        """Schedule the leading plain decodes known from the last commit, if that is exact.

        Exact when every one of them gets its token (the budget covers them all) and the
        blocks they open fit in the free pool (so no allocation fails and nothing is
        preempted): then the running loop would do just this — allocate for the requests
        at a block boundary, in order, and schedule one token each.  Returns the prefix
        scheduled and its decode contexts, or ``(None, None)`` (the loop takes every
        running request).
        """
        pre, self._prefix = self._prefix, None
        if pre is None or dt != 1:
            return None, None
        m = len(pre.reqs)
        if m == 0 or m > budget or self.running[:m] != pre.reqs:
            self._drop_lazy()
            return None, None
        pool = self.pool
        if pool.compiled and self._bulk_replay():  # the check, the boundary requests and their replay in C
            # The chain callback as a bound method (getattr): compiled, ``self._chain`` of the base
            # type would be turned into a wrapper of its C function with the wrong arguments.
            ctx = _core.decode_pass(pool.core, pre.reqs, pre.computed, pool.block_size, self.caching,
                                    getattr(self, "_chain"), pool.on_evict)
            if ctx is None:
                self._drop_lazy()
                return None, None
            return pre, ctx
        ctx, due, due_computed, opens = self._arith.decode_due(pre.computed, self.bs, self.caching)
        free = pool.num_free_blocks
        if len(due) > free and opens > free:
            self._drop_lazy()
            return None, None
        reqs = pre.reqs
        if due:
            hit = [reqs[j] for j in due]
            if self._bulk_replay():  # the stretch replay, for one pass
                self._replay(hit, due_computed, 0, 1)
            else:
                for vr in hit:  # their fields are written back at every commit on this path
                    ok = self._allocate(vr, 1)
                    assert ok, "vLLM model: decode beyond the free blocks"
        return pre, ctx

    def _drop_lazy(self) -> None:
        """Bring the lazy prefix's requests up to date and stop tracking it (the running loop
        reads their fields)."""
        if self._lazy is not None:
            self._lazy.write_back()
            self._lazy = None

    def _next_prefix(self, batch: _VBatch, k: int) -> None:
        """After ``k`` committed passes of ``batch``: the leading plain decodes for the next pass.

        The batch's prefix advanced by ``k`` tokens, less the requests that finished, then
        extended by the running requests right after it that are now plain decodes (a
        prompt whose last chunk just ran, usually).
        """
        self._prefix = self._lazy = None
        pre = batch.prefix
        if pre is None:
            return
        pre = pre.advanced(k, self._arith)
        if self.spec is not None or len(self.running) < self.fast_decodes_min:
            pre.write_back()
            return
        running = self.running
        m = j = len(pre.reqs)
        while j < len(running):
            vr = running[j]
            if vr.computed != vr.num_tokens - 1 or vr.generated <= 0:
                break
            j += 1
        if j > m:
            pre = pre.extended(running[m:j], self._arith)
        if len(pre.reqs) < self.fast_decodes_min or not self._bulk_replay():
            pre.write_back()  # the per-event block paths read the requests' own fields
            if len(pre.reqs) < self.fast_decodes_min:
                return
        self._prefix = self._lazy = pre


    # -- committing decode stretches -------------------------------------------------------
    def complete_stretch(self, plan: PassPlan, ends: np.ndarray) -> None:
        """Commit ``ends.size`` identical decode passes, replaying their block events in order."""
        self._in_flight = False
        batch: _VBatch = plan.requests
        reqs = batch.reqs
        k = int(ends.size)
        pre = batch.prefix  # the leading plain decodes: their rows advance in _next_prefix
        m = len(pre.reqs) if pre is not None else 0
        # A stretch follows a decode-only pass, whose schedule recorded computed and left_min.
        c0 = batch.computed  # an int64 array: the compiled replay reads it in place
        # Pass s (1..k-1) computes position c0 + s of each request; at its start (the end of
        # pass s-1) it allocates a block when that position opens one, and registers a
        # block when the position fills one.
        pool = self.pool
        if self._bulk_replay():
            self._replay(reqs, c0, 1, k)
        else:
            c0_list = c0.tolist()
            self._replay_stretch(reqs, c0_list, stretch_block_events(c0_list, k, self.bs, self.caching), ends)
        end = ends.item(k - 1)
        pool.now = end
        if m < len(reqs):  # the requests after the leading decodes (usually none)
            for vr, c in zip(reqs[m:], c0[m:].tolist()):
                vr.computed = c + k
                vr.generated += k
                vr.num_tokens += k
                vr.sched = 0
        self.rec.emit_stretch(batch.idx, ends)
        if batch.left_min <= k:  # else no request reached max_new (left_min is their minimum)
            done = self._finished_in_prefix(pre, k) if m else []
            self._finish_done(done + reqs[m:] if m else reqs, end)
        self._next_prefix(batch, k)

    def _finished_in_prefix(self, pre: _DecodePrefix, k: int) -> list[VReq]:
        """The prefix's requests that sample their last token within ``k`` passes, written
        back to their state after those passes (they leave the prefix)."""
        return pre.write_back(k, self._arith.finishing(pre.rows, k))

    def _replay_stretch(self, reqs: list[VReq], c0: list[int], keys: list[int], ends: np.ndarray) -> None:
        """The block events of a decode stretch through :meth:`_allocate`, each at its pass's time.

        Requests are moved to the state of the pass at hand for each event and put back
        to their state before the stretch at the end.
        """
        n = len(reqs)
        g0 = [vr.generated for vr in reqs]
        pool = self.pool
        for key in keys:
            s, j = divmod(key, n)
            vr = reqs[j]
            vr.computed = c0[j] + s
            vr.generated = g0[j] + s
            vr.num_tokens = vr.req.input_length + vr.generated
            pool.now = float(ends[s - 1])
            ok = self._allocate(vr, 1)
            assert ok, "vLLM model: decode stretch beyond the free blocks"
        for vr, c, g in zip(reqs, c0, g0):
            vr.computed = c
            vr.generated = g
            vr.num_tokens = vr.req.input_length + g

    def _bulk_replay(self) -> bool:
        """Whether decode block events can be replayed in bulk (LRU, no KV event sink; on the
        compiled pool, with the compiled replay built)."""
        pool = self.pool
        return pool.on_event is None and ((pool.compiled and _core is not None) or (not pool.compiled and pool._lru))

    def _replay(self, reqs: list[VReq], c0: list[int] | np.ndarray, first: int, k: int) -> None:
        """Decode block events of passes ``first..k-1`` in bulk: on the compiled pool, or in Python."""
        pool = self.pool
        if pool.compiled:
            _core.replay_decode(pool.core, reqs, c0, first, k, pool.block_size, self.caching,
                                getattr(self, "_chain"), pool.on_evict)  # getattr: see _fast_decodes
        else:
            self._replay_lru(reqs, c0 if type(c0) is list else c0.tolist(), first, k)

    def _replay_lru(self, reqs: list[VReq], c0: list[int], first: int, k: int) -> None:
        """The block events of decode passes ``first..k-1`` under LRU without KV event sinks, in order.

        Pass ``s`` computes position ``c0[j] + s`` of request ``j``.  Same effects as calling
        :meth:`_allocate` for it: a pass that opens a block takes one from the head of the
        free queue (evicting its hash); one that fills a block registers it.  Between passes
        a running request holds ``ceil(computed / bs)`` blocks of which
        ``computed // bs`` are registered (``check_invariants``), so each event touches
        exactly one block and ``_allocate``'s checks reduce to the event's kind.  Used for
        a stretch (``first`` 1: pass 0 was allocated when scheduled) and for the requests at
        a block boundary in one pass (``first`` 0, ``k`` 1).  A request's unit chain is extended
        once for all passes (at its first fill beyond it) instead of once per block.
        """
        bs = self.bs
        pool = self.pool
        table = pool._hash_to_block
        refs, block_hash = pool.refs, pool.hashes
        free = pool._free
        popleft, entries = free.q.popleft, free.entries
        on_evict = pool.on_evict
        fills = 0
        buckets = decode_event_buckets(c0, first, k, bs, self.caching)
        for s in range(first, k):
            for j, kind in buckets[s % bs]:
                vr = reqs[j]
                if kind == 0:  # opens a block: FreeQueue.popleft, inlined
                    b = popleft()
                    e = entries[b] - 1
                    entries[b] = e
                    while e or refs[b]:  # a stale entry
                        b = popleft()
                        e = entries[b] - 1
                        entries[b] = e
                    free.live -= 1
                    h = block_hash[b]
                    if h is not None:  # recycling a cached block evicts it
                        del table[h]
                        block_hash[b] = None
                        if on_evict is not None:
                            on_evict((h,))
                    refs[b] = 1
                    vr.blocks.append(b)
                    continue
                i = (c0[j] + s + 1) // bs - 1  # fills block i
                vr.n_cached = i + 1
                if i >= vr.private_from:  # no other request can look it up: not registered
                    continue
                fills += 1
                chain = vr.chain
                us = vr.req.block_size
                if ((i + 1) * bs - 1) // us >= len(chain):
                    chain = self._chain(vr, (c0[j] + k) // bs)
                b = vr.blocks[i]
                h = chain_block_hash(chain, bs, i, unit_size=us)
                if block_hash[b] is not None or h in table:
                    continue
                if refs[b] <= 0:
                    raise RuntimeError(f"caching {pool.blocks[b]!r}, which is not in use")
                block_hash[b] = h
                table[h] = b
        pool._seq += fills  # as many logical-clock ticks as cache_full_blocks calls


    # -- fast-forward -------------------------------------------------------------------------
    def decode_stretch_limit(self) -> int:
        """Decode passes that will repeat unchanged: no admission, finish, preemption or failed allocation."""
        batch = self._last
        if batch is None or not batch.decode_only or batch.preempted:
            return 1
        if self.ready or self.spec is not None:  # transferred KV waiting; speculative passes vary
            return 1
        reqs = batch.reqs
        n = len(reqs)
        if n != len(self.running) or n == 0:
            return 1
        bs = self.bs
        c = batch.computed
        limit = batch.left_min
        if self.waiting and n < self.max_seqs and n < self.budget:
            # The waiting head failed on blocks; it keeps failing while the pool is unchanged.
            limit = min(limit, self._arith.passes_to_block_event(c, bs, self.caching))
        return self._arith.stretch_within_free_blocks(c, bs, self.pool.num_free_blocks, limit)

    def decode_stretch_plan(self) -> tuple:
        """:meth:`decode_stretch_limit`, or more passes made of the same stretches: ``(steps,
        starts)``, ``starts`` None for one stretch, else a bytearray of ``steps`` flags, 1 where
        a stretch of the pass-by-pass schedule starts (pass 0 aside).

        While a waiting head is blocked, :meth:`decode_stretch_limit` ends a stretch at every
        block event, where the head is looked at again: most of an agentic run's stretches are
        a pass or two.  Most of those looks change nothing: the head stays blocked until a fill
        under the hash of its first uncached block, or an open that takes one of its cached
        blocks (:meth:`_blocked_head_passes`).  Up to there this returns the stretches that
        :meth:`decode_stretch_limit` would give one after another (each ends at the next block
        event, or at the first finish), as one: the worker prices each from its own start
        (``starts``), so that every pass end is the one of the pass-by-pass stretches bit for
        bit, and the commit replays their block events in the same order.
        """
        limit = self.decode_stretch_limit()
        batch = self._last
        if (batch is None or not batch.decode_only or batch.preempted or self.ready or self.spec is not None
                or not self.waiting or self.host is not None or not self._bulk_replay()):
            return limit, None
        n = len(batch.reqs)
        lm = batch.left_min
        if n != len(self.running) or n == 0 or n >= self.max_seqs or n >= self.budget or limit >= lm:
            return limit, None
        c = batch.computed
        bs = self.bs
        top = self._blocked_head_passes(c, lm)
        if top <= limit:
            return limit, None
        top = self._arith.stretch_within_free_blocks(c, bs, self.pool.num_free_blocks, min(top, lm))
        if top <= limit:
            return limit, None
        # Pass s has a block event iff s % bs is one of the requests' open / fill residues.
        event = bytearray(bs)
        for x in c.tolist():
            event[(-x) % bs] = 1
            if self.caching:
                event[(-x - 1) % bs] = 1
        starts = bytearray(top)
        p = 0  # the end of the last whole stretch within top
        while True:
            e = p + 1
            while e < lm and not event[e % bs]:
                e += 1
            if e > top:
                break
            if p == 0 and e != limit:  # not the stretch decode_stretch_limit gives: keep that
                return limit, None
            p = e
            if p >= top:
                break
            starts[p] = 1
        if p <= limit:
            return limit, None
        return p, starts[:p]

    def _blocked_head_passes(self, c: np.ndarray, limit: int) -> int:
        """Passes of a decode stretch (at most ``limit``; ``c``: its requests' computed tokens)
        through which the waiting head, which failed to get its blocks at this pass, keeps failing.

        What it needs follows from its cached prefix alone (with the budget and seats, which
        the stretch keeps), and the free blocks only fall: a stretch changes the pool by its
        block events.  An *open* takes the free queue's head block; one that lies in the
        head's prefix cuts the prefix there (:meth:`prefix_cuts`), which changes what the head
        needs: fresh blocks for a longer (or budget-capped) chunk, fewer of its hits on free
        blocks; :meth:`_head_fits` tells whether it then fits the blocks left, after each pass
        that opens blocks.  Any other open only takes a free block.  A *fill* registers a
        block; one under the hash of the head's first uncached block (``hit``, or a cut)
        extends its prefix, any other leaves it as it is.  So the head stays blocked up to the
        first pass after which it fits or a fill under one of those hashes.
        """
        first = self._arith.passes_to_block_event(c, self.bs, self.caching)
        if first >= limit or not self._bulk_replay() or self.host is not None:
            return first
        if not self.caching:  # no prefix: the head needs the same blocks, fewer stay free
            return limit
        bs = self.bs
        head = self.waiting[0]
        hit = self._cached_blocks(head, head.num_tokens)  # (VLLMEngine._lookup: it remembers this lookup)
        computed = c.tolist()
        opens = 0  # over passes 1..limit-1 (pass 0's were taken when it was scheduled)
        for x in computed:
            opens += (x + limit - 1) // bs - x // bs
        got = self.pool.prefix_cuts(head, head.req.block_size, hit, opens)
        if got is None:
            return first
        free0, cuts = got
        cap = (head.num_tokens - 1) // bs
        us = head.req.block_size
        if not cuts:
            if hit >= cap:  # its whole prefix is cached already
                return limit
            return self._first_fill_under(computed, limit, {chain_block_hash(head.chain, bs, hit, unit_size=us)})
        free = self.pool.num_free_blocks
        room = self.budget - len(computed)  # the budget the decodes leave
        if self._head_fits(head, hit, free0, free, room):  # not blocked on blocks: do not guess
            return first
        per = [0] * bs  # opens per pass, by pass number modulo bs
        for x in computed:
            per[(-x) % bs] += 1
        best = limit
        taken = 0
        k = 0
        h = hit
        hfree = free0
        positions = set()
        if hit < cap:
            positions.add(hit)
        for s in range(1, limit):
            o = per[s % bs]
            if not o:
                continue
            taken += o
            free -= o
            while k < len(cuts) and cuts[k][0] < taken:
                h = cuts[k][1]
                hfree = cuts[k][2]
                positions.add(h)
                k += 1
            if self._head_fits(head, h, hfree, free, room):
                best = s
                break
            if k == len(cuts):  # no more cuts: the free blocks only fall, the head keeps failing
                break
        return self._first_fill_under(computed, best,
                                      {chain_block_hash(head.chain, bs, q, unit_size=us) for q in positions})

    def _head_fits(self, head: VReq, hit: int, hit_free: int, free: int, room: int) -> bool:
        """Whether the waiting loop admits ``head`` with a cached prefix of ``hit`` blocks,
        ``hit_free`` of them free, ``free`` free blocks and ``room`` tokens of budget left
        (``VLLMEngine._admit`` and ``_allocate_new``, without a host tier)."""
        bs = self.bs
        n = head.num_tokens - hit * bs
        thr = self.threshold
        if 0 < thr < n:
            n = thr
        if not self.chunked_prefill and n > room:
            return False
        if n > room:
            n = room
        need = -(-(hit * bs + n) // bs) - hit
        return need + hit_free <= free

    def _first_fill_under(self, computed: list[int], limit: int, hashes: set) -> int:
        """The first pass ``s`` in ``1..limit-1`` of the last pass's decode stretch whose fill
        (of request ``j`` at position ``computed[j] + s``) registers a block under one of
        ``hashes``; ``limit`` if none does.  Blocks from a request's ``private_from`` on are not
        registered."""
        if not hashes:
            return limit
        bs = self.bs
        reqs = self._last.reqs
        best = limit
        for j in range(len(computed)):
            vr = reqs[j]
            x = computed[j]
            s = (-(x + 2)) % bs + 1  # position x + s fills block (x + s + 1) // bs - 1
            us = vr.req.block_size
            while s < best:
                i = (x + s + 1) // bs - 1
                if i >= vr.private_from:
                    break
                if chain_block_hash(self._chain(vr, i + 1), bs, i, unit_size=us) in hashes:
                    best = s
                    break
                s += bs
        return best

    # -- state ---------------------------------------------------------------------------------
    def running_progress(self) -> list[tuple[VReq, int, int, int]]:
        """Each running request with its true ``(computed, sched, generated)``.

        A lazy prefix's rows stand in for its requests' own fields (see :class:`_DecodePrefix`);
        ``num_tokens`` is always ``input_length + generated``.
        """
        lazy = self._lazy
        m = len(lazy.reqs) if lazy is not None else 0
        out = []
        if m:
            sched = 1 if self._in_flight else 0
            for vr, c, left in zip(lazy.reqs, lazy.computed.tolist(), lazy.left.tolist()):
                out.append((vr, c, sched, vr.max_new - left))
        out.extend((vr, vr.computed, vr.sched, vr.generated) for vr in self.running[m:])
        return out

