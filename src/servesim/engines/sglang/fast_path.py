"""SGLang's decode path, beside the reference scheduler (``scheduler.py``).

Between admissions SGLang's worker runs one decode pass after another over the same running
batch, and that is most of a simulation's passes.  This module holds what those passes
touch: the request state (:class:`SGReq`) and the pass records, the running batch kept as
columns (``batch.py``), the decode pass's plan and commit, the multi-pass decode stretches
(:meth:`SGLangDecodeFastPath.complete_stretch`, :meth:`~SGLangDecodeFastPath.decode_stretch_limit`,
with the evictions they may fold in), and the KV bookkeeping of a request that leaves the
batch (page helpers, radix-tree insertion and release).

The reference scheduling — arrivals, admission (``PrefillAdder``), prefill passes,
retraction, abort — is ``scheduler.py:SGLangEngine``, which extends
:class:`SGLangDecodeFastPath`.  Both modules are compiled from source; ``fast_path.pxd``
types this one and ``scheduler.pxd`` cimports it, so the calls between the two stay C calls.
A stretch must commit exactly what its passes one by one would
(``tests/engines/sglang/test_sglang_stretch_eviction.py`` and ``benchmarks/check_identical.py``).
"""

from __future__ import annotations

import numpy as np

from servesim.engines.base import Engine
from servesim.engines.sglang.batch import NO_LIMIT
from servesim.kvcache.radix_cache import MatchResult
from servesim.metrics.recorder import Status
from servesim.perf.plan import PassPlan
from servesim.workload.request import Request


class SGReq:
    """Engine-side state of one request.

    A plain class, not a dataclass: engines/sglang/fast_path.pxd types its fields when the
    module is compiled.
    """

    __slots__ = ("req", "max_new", "generated", "computed", "prefix", "node", "alloc", "fill", "extend",
                 "host_hit", "admitted_once")

    def __init__(self, req: Request, max_new: int, fill: int = 0) -> None:
        self.req = req
        self.max_new = max_new
        self.generated = 0
        #: Tokens whose KV exists (prompt, then all generated tokens but the last sampled one).
        self.computed = 0
        #: Page-aligned tokens held in the radix tree and locked by this request.
        self.prefix = 0
        self.node: object = None
        #: KV tokens allocated privately (outside the tree), page rounded.
        self.alloc = 0
        #: Tokens to compute before the next token can be sampled (prompt + generated).
        self.fill = fill
        #: Tokens being computed in the pass in flight.
        self.extend = 0
        #: Tokens loaded from the host tier when this round was admitted (recorded, then reset).
        self.host_hit = 0
        self.admitted_once = False

    def __repr__(self) -> str:
        return (f"SGReq(index={self.req.index}, max_new={self.max_new}, generated={self.generated}, "
                f"computed={self.computed}, prefix={self.prefix}, alloc={self.alloc}, fill={self.fill})")

    @property
    def remaining_new(self) -> int:
        return max(self.max_new - self.generated, 0)


class _PrefillBatch:
    """A prefill pass: its requests, and the one whose prompt it only partly computes (if any).

    (Plain classes here and below, not dataclasses: engines/sglang/fast_path.pxd types them.)
    """

    __slots__ = ("reqs", "chunked")

    def __init__(self, reqs: list[SGReq], chunked: SGReq | None) -> None:
        self.reqs = reqs
        self.chunked = chunked


class _DecodeBatch:
    """A decode pass: the first ``n`` running requests (the whole running batch)."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n


class _GhostBatch:
    """The overlap scheduler's decode of ``n`` requests that had already finished (emits nothing)."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n


class SGLangDecodeFastPath(Engine):
    """The SGLang engine's decode path: the running batch, its decode passes and stretches.

    Not an engine by itself: :class:`~servesim.engines.sglang.scheduler.SGLangEngine` extends
    it with the reference scheduling; its ``__init__`` sets the state read here (the radix
    tree and pool, the running ``batch``, the queues, ``new_token_ratio`` and its decay, the
    overlap ``lag`` and ``recv`` interval) and it provides :meth:`_retract`.
    """

    # -- the reference scheduler's (scheduler.py) ------------------------------------------
    def _retract(self, need: int) -> None:
        """Retract running requests until a decode pass's ``need`` tokens fit (SGLangEngine's)."""
        raise NotImplementedError

    # -- pool ---------------------------------------------------------------------------
    def _ceil_page(self, n: int) -> int:
        p = self.page
        return -(-n // p) * p

    def _floor_page(self, n: int) -> int:
        return (n // self.page) * self.page

    @property
    def free(self) -> int:
        return self.pool.free_tokens

    def _evict_to(self, n: int) -> None:
        """Evict unlocked cache until ``n`` tokens are free (or nothing is left to evict)."""
        if self.pool.free_tokens < n:
            self.tree.evict(n - self.pool.free_tokens)

    def _grow(self, sr: SGReq, new_computed: int) -> bool:
        """Allocate private KV so that ``new_computed`` tokens fit."""
        need = self._ceil_page(new_computed) - sr.prefix - sr.alloc
        if need > 0:
            if not self.tree.alloc(need):
                return False
            sr.alloc += need
        return True

    @property
    def evictable(self) -> int:
        return self.tree.evictable_size

    # -- the running batch as columns ------------------------------------------------------
    def _run_append(self, sr: SGReq) -> None:
        self.batch.append(sr)
        left = sr.max_new - sr.generated
        if left < self._left_min:
            self._left_min = left

    def _run_rebuild(self, reqs: list[SGReq]) -> None:
        """Replace the running batch by ``reqs`` (objects up to date)."""
        self.batch.clear()
        self._left_min = NO_LIMIT
        for sr in reqs:
            self._run_append(sr)

    def _run_left_min(self) -> None:
        self._left_min = self.batch.left_min()

    # -- the decode pass ---------------------------------------------------------------------
    def _decode_plan(self) -> PassPlan:
        need = self._decode_need_run()
        if self.pool.free_tokens < need:
            self.tree.evict(need)
        if self.pool.free_tokens < need:
            self._retract(need)
            need = self._decode_need_run()
        else:
            self.new_token_ratio = max(self.new_token_ratio - self.ratio_decay, self.min_ratio)
        n = self.batch.n
        ctx = self.batch.contexts()
        # Each request's private KV grows to ceil_page(computed + 1): ``need`` tokens in all.
        grown = self.tree.alloc(need)
        assert grown, "SGLang model: decode without KV room after retraction"
        if self.spec is not None:  # verify k drafts + 1: KV for k + 1 tokens per request
            self._decode_in_flight = self.spec.tokens
            return PassPlan(decode_ctx=ctx, decode_tokens=self.spec.tokens, requests=_DecodeBatch(n))
        self._decode_in_flight = True
        return PassPlan(decode_ctx=ctx, requests=_DecodeBatch(n))

    def _decode_need_run(self) -> int:
        """Tokens the running batch's next decode pass allocates (a page per request at a page boundary)."""
        if self.spec is not None:
            return self._spec_need(self.batch.columns()[0])
        return self.batch.decode_need(self.page)

    def _spec_need(self, comp: np.ndarray) -> int:
        """KV tokens a speculative pass allocates: each request grows to ceil_page(computed + k + 1)."""
        p, t = self.page, self.spec.tokens
        return p * int(((comp + t + p - 1) // p - (comp + p - 1) // p).sum())

    def _complete_decode(self, n: int, end: float) -> None:
        assert n == self.batch.n, "SGLang model: running batch changed under a decode pass"
        if self.spec is not None:
            self._complete_spec_decode(n, end)
            return
        self.rec.emit(self.batch.indices(), end)
        self.batch.advance(1, self.page)
        self._decode_in_flight = False
        self._left_min -= 1
        if self._left_min <= 0:
            self._finish_done(end)

    def _complete_spec_decode(self, n: int, end: float) -> None:
        """Speculative pass: each request keeps its accepted drafts plus one token (never past max_new).

        KV was allocated for k + 1 tokens; the rejected drafts' slots are freed.
        """
        comp, gen, max_new, _prefix = self.batch.columns()
        acc = np.minimum(self.spec.draw(n), max_new - gen)
        p, t = self.page, self.spec.tokens
        surplus = p * int(((comp + t + p - 1) // p - (comp + acc + p - 1) // p).sum())
        if surplus:
            self.tree.free(surplus)
        self.rec.emit(self.batch.indices(), end, acc)
        comp += acc
        gen += acc
        self._decode_in_flight = False
        self._run_left_min()
        if self._left_min <= 0:
            self._finish_done(end)

    def _finish_done(self, end: float) -> None:
        """Requests of the running batch that reached ``max_new`` leave it and end."""
        done = self.batch.remove_done(self.page)
        self._run_left_min()
        if not done:
            return
        self.batch_is_full = False
        if self.lag is not None and self.batch.n == 0:
            # the pass chosen meanwhile still holds them (engines/sglang/overlap.py)
            self.lag.ghost_ctx = np.array([sr.computed + 1 for sr in done], dtype=np.int64)
        for sr in done:
            self._release(sr, insert=True)
            self._end(sr, end)

    def _end(self, sr: SGReq, end: float) -> None:
        if sr.max_new < sr.req.output_length:
            self.rec.finished(sr.req.index, end, Status.COMPLETED, "output cut at the context length")
            self.terminated.append(sr.req)
        else:
            self._finish(sr.req, end)

    # -- decode stretches (fast-forward) ----------------------------------------------------
    def complete_stretch(self, plan: PassPlan, ends: np.ndarray) -> None:
        batch = self.batch
        assert plan.requests.n == batch.n, "SGLang model: running batch changed under a decode stretch"
        k = int(ends.size)
        end = float(ends[-1])
        self.tree.now = end
        # Passes 2..k of the stretch: same requests, one more token each; the first pass's
        # allocation was made at schedule time, the others' here.
        self.rec.emit_stretch(batch.indices(), ends)
        extra = batch.advance(k, self.page)
        if extra > self.pool.free_tokens:  # passes that evict first (see decode_stretch_limit)
            self._alloc_evicting(batch.n, k - 1)
        else:
            grown = self.tree.alloc(extra)
            assert grown, "SGLang model: decode stretch beyond the free KV"
        self.new_token_ratio = max(self.new_token_ratio - self.ratio_decay * (k - 1), self.min_ratio)
        if self.lag is not None:  # the last pass of the stretch was decided when the one before began
            self.lag.ended(end, float(ends[k - 2]) if k > 1 else None)
        if self.recv is not None:  # the scheduler iterations of passes 2..k
            self.recv.skip_decode_iterations(k - 1)
        self._decode_in_flight = False
        self._left_min -= k
        if self._left_min <= 0:
            self._finish_done(end)

    def _alloc_evicting(self, n: int, passes: int) -> None:
        """The KV of ``passes`` decode passes of ``n`` requests (a token each, page 1), with the
        evictions pass-by-pass scheduling makes: a pass that finds fewer than ``n`` tokens free
        first evicts ``n`` tokens of cache (``_decode_plan``).  Exact only where eviction
        ignores the time and reports to no one (:meth:`_evictions_fold`)."""
        tree = self.tree
        while passes:
            fit = min(self.pool.free_tokens // n, passes)  # passes that find their tokens free
            if fit:
                grown = tree.alloc(n * fit)
                assert grown
                passes -= fit
            if passes:
                tree.evict(n)
                grown = tree.alloc(n)
                assert grown, "SGLang model: decode stretch beyond the free KV and the cache"
                passes -= 1

    def _evictions_fold(self) -> bool:
        """Whether a decode stretch may run through passes that evict cache: eviction must not
        depend on the time (LRU, LFU, FIFO) nor be seen outside (KV events, a host tier), and
        pages must be single tokens (a pass then needs one token per request)."""
        tree = self.tree
        return self.page == 1 and tree.eviction_ignores_time and tree.on_event is None and tree.on_evict is None

    def decode_stretch_limit(self) -> int:
        """Decode passes that will repeat unchanged: nothing can be admitted, finish or be retracted.

        Passes may evict cache where :meth:`_evictions_fold` allows (the commit replays the
        evictions in order); the unlocked cache never changes otherwise during the stretch, so
        every pass finds its tokens while the stretch's need fits the free and evictable KV.
        """
        if self.chunked is not None or not self.running:
            return 1
        if self.ready or self.spec is not None:  # transferred KV waiting; speculative passes vary
            return 1
        if self.waiting and not self.batch_is_full:
            return 1
        # The pass just scheduled already holds its token; further passes need one each.
        k = self._left_min
        if self.inbox:  # the iteration that pulls them may admit them: stop before it
            k = min(k, self.recv.decode_passes_before_pull() if self.recv is not None else 1)
        n = self.batch.n
        if self.page == 1:
            free = self.pool.free_tokens
            kv = free + self.tree.evictable_size if self._evictions_fold() else free
            room = kv // n + 1 if n else k
        else:
            room = self.pool.free_tokens // (n * self.page) + 1
        return max(1, min(k, room))

    def input_lag_passes(self) -> int:
        """Passes after the one in flight that an arrival cannot change: the overlap loop chose
        the next one already (engines/sglang/overlap.py), so a decode stretch may run through it."""
        return 0 if self.lag is None else 1

    # -- radix-tree bookkeeping ---------------------------------------------------------------
    def _insert_computed(self, sr: SGReq, match: bool = False) -> tuple[int, MatchResult | None]:
        """Move the request's page-aligned computed tokens into the tree; returns the aligned
        length and, with ``match``, the match of those tokens (None if nothing was inserted)."""
        aligned = self._floor_page(sr.computed)
        if aligned <= sr.prefix:
            return sr.prefix, None
        # The walk starts at the request's locked node, which ends its first ``prefix`` tokens,
        # and reads the request's block ids as it goes (a new leaf keeps the request's run).
        res = None
        if match:
            present, res = self.tree.insert_request_after_and_match(sr.req, sr.node, sr.prefix, aligned)
        else:
            present = self.tree.insert_request_after(sr.req, sr.node, sr.prefix, aligned)
        # Tokens [prefix, present) were computed privately but already cached by another
        # request meanwhile: free our copies.  Tokens [present, aligned) now belong to the tree.
        dup = max(present - sr.prefix, 0)
        if dup:
            self.tree.free(dup)
        sr.alloc -= aligned - sr.prefix
        return aligned, res

    def _cache_unfinished(self, sr: SGReq) -> None:
        """Insert what the request computed so far and move its lock to the new end."""
        if self.opt.disable_radix_cache:
            return
        aligned, res = self._insert_computed(sr, match=True)
        if res is None:
            return
        self.tree.inc_lock_ref(res.node)
        self.tree.dec_lock_ref(sr.node)
        sr.node = res.node
        sr.prefix = aligned

    def _release(self, sr: SGReq, insert: bool) -> None:
        """A request leaves: keep its tokens as cache (finish) or drop them (retraction)."""
        if insert and not self.opt.disable_radix_cache:
            self._insert_computed(sr)
        if sr.alloc:
            self.tree.free(sr.alloc)
        sr.alloc = 0
        self.tree.dec_lock_ref(sr.node)
        sr.node = None
