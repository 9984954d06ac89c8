"""vLLM v1's scheduler and hashed block pool, as a model.

(Longer than 600 lines because the scheduler and its decode fast path — the leading plain
decodes kept as arrays, ``_DecodePrefix``, and their bulk block replay — are compiled as one
module: the fast path's calls into the scheduler's state are C calls.  The block-KV work
itself is the shared manager's, ``engines/blockkv/manager.py``.)

Follows vLLM 0.11.0 (``v1/core/sched/scheduler.py``, ``v1/core/kv_cache_manager.py``,
``v1/core/block_pool.py``); docs/engines.md lists what is modelled and what is left out.
In short:

* There are no prefill and decode phases: each request has tokens (prompt plus sampled
  output) and computed tokens, and a pass lets requests catch up.  Prefill chunks and
  decodes share one pass under one token budget (``max_num_batched_tokens``).
* Running requests go first, in admission order: each gets
  ``min(remaining, long_prefill_token_threshold if set, budget left)`` tokens and the
  blocks they need.  When blocks run out, the *last* running request is preempted
  (recompute: its blocks are freed, it goes to the front of the waiting queue and later
  recomputes prompt and output, minus prefix-cache hits) and the allocation is retried;
  if the request preempted itself, the running loop stops.
* Then, only if nothing was preempted, waiting requests are admitted FCFS while seats
  (``max_num_seqs``), budget and blocks allow; the first that does not fit stops
  admission.  A new request's chunk fills the budget left (with chunked prefill off, a
  prompt that does not fit the budget waits).
* Prefix cache: only full blocks match, walking the chained block hashes from the start;
  the hit is capped at ``num_tokens - 1`` so the last token is recomputed (a fully cached
  prompt of whole blocks recomputes its last block).  Full blocks are registered at
  allocation time, generated blocks included.
* Blocks of a finished or preempted request are freed tail first and stay cached in the
  free queue (LRU) until an allocation recycles them.
* A request whose tokens are all computed by a pass samples its next token at the pass
  end (a prompt's first token at the end of its last chunk).
* Block 0 is vLLM's reserved null block: the pool has ``kv_tokens // block_size - 1``
  usable blocks.

Simulator rules (not vLLM's): a prompt with no room for one output token within
``max_model_len`` is rejected, and output is cut at ``max_model_len``; the effective
length is also capped at the KV pool (vLLM refuses to start when ``max_model_len`` does
not fit its KV cache), so every admitted request can run alone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Set as AbstractSet

import numpy as np

from servesim.engines.base import EngineLimits, EngineSnapshot
from servesim.engines.blockkv.arithmetic import decode_event_buckets, stretch_block_events
from servesim.engines.blockkv.manager import BlockKVEngine
from servesim.engines.vllm.options import VLLMOptions, resolve_vllm_options
from servesim.errors import ConfigError
from servesim.kvcache.hashing import chain_block_hash
from servesim.kvcache.block_owner import NO_PRIVATE_BLOCKS, BlockOwner
from servesim.metrics.recorder import RequestRecorder
from servesim.perf.plan import PassPlan
from servesim.workload.request import OUTPUT_ID_BASE, Request, output_block_id


class VReq(BlockOwner):
    """Engine-side state of one request; its blocks, unit chain and registered blocks are
    the :class:`~servesim.kvcache.block_owner.BlockOwner` fields the compiled pool reads.

    (Plain classes here, not dataclasses: engines/vllm/scheduler.pxd types them when the module is
    compiled.)
    """

    __slots__ = ("max_new", "generated", "computed", "sched", "admitted_once", "num_tokens")

    def __init__(self, req: Request, max_new: int, num_tokens: int = 0) -> None:
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


class VLLMEngine(BlockKVEngine):
    """One vLLM worker (one tensor-parallel group)."""

    name = "vllm"
    supports_speculative = True
    #: Fewest leading decodes worth tracking as arrays: below this the running loop is
    #: cheaper than the array operations' fixed cost (measured crossover ~20 requests).
    FAST_DECODES_MIN = 16

    def __init__(self, worker_id: int, recorder: RequestRecorder, limits: EngineLimits,
                 options: VLLMOptions, oracle=None) -> None:
        super().__init__(worker_id, recorder, limits)
        opt = resolve_vllm_options(options, None, None, limits.context_length)
        self.opt = opt
        # Block 0 is vLLM's reserved null block: the pool has kv_tokens // block_size - 1 blocks.
        self._init_blocks("vllm", limits, opt.block_size, 1, opt.eviction_policy, opt.enable_prefix_caching,
                          "enable_prefix_caching", "prefix caching", oracle, opt.host_kv_gb, opt.host_link_gbs,
                          opt.host_load_overlap)
        self.budget = int(opt.max_num_batched_tokens)
        self.max_seqs = int(opt.max_num_seqs)
        self.max_model_len = int(opt.max_model_len)
        self.max_len = min(self.max_model_len, self.capacity)
        self.chunked_prefill = opt.enable_chunked_prefill
        self.threshold = opt.long_prefill_token_threshold
        if not self.chunked_prefill and self.budget < self.max_model_len:
            raise ConfigError(
                f"engine.max_num_batched_tokens: {self.budget} is smaller than max_model_len "
                f"{self.max_model_len}; with enable_chunked_prefill false vLLM requires it to be at least that")
        self.waiting: deque[VReq] = deque()
        self.running: list[VReq] = []
        self._last: _VBatch | None = None
        #: Leading running requests known to be plain decodes (set at each commit).
        self._prefix: _DecodePrefix | None = None
        #: The prefix whose rows are the truth for its requests (``running[:len(reqs)]``):
        #: with the bulk block replay their own fields lag behind until written back (see
        #: :class:`_DecodePrefix`); otherwise they are written back at every commit.
        self._lazy: _DecodePrefix | None = None
        #: Whether a scheduled pass awaits its commit (the lazy requests' ``sched`` is then 1).
        self._in_flight = False
        #: Disaggregated decode: requests whose prompt KV arrived, awaiting admission.
        self.ready: deque[VReq] = deque()
        self._loading = 0  # host tokens loaded for the pass being scheduled
        #: :attr:`FAST_DECODES_MIN` for this engine (tests vary it per engine).
        self.fast_decodes_min = self.FAST_DECODES_MIN
        #: The workload's shared block ids (:meth:`use_shared_block_ids`), or None: then every
        #: full block is registered as it fills.
        self._shared: AbstractSet[int] | None = None

    # -- arrivals -------------------------------------------------------------------------
    def add_request(self, req: Request, now: float, kv_ready: int = 0) -> None:
        if self._reject_unfit(req, now, self.max_model_len, "max_model_len"):
            return
        n = req.input_length
        max_new = min(req.output_length, self.max_len - n)
        vr = VReq(req, max(1, max_new), n)
        if self._shared is not None:
            vr.private_from = self._private_from(req)
        if kv_ready:  # disaggregated decode: admitted by _admit_ready, no prefill pass
            self.ready.append(vr)
            return
        self.waiting.append(vr)

    # -- private blocks ---------------------------------------------------------------------
    # A full block is registered in the prefix cache so that a later lookup can hit it.  A
    # block whose unit id no other request lists (nor the same id's blocks after it: their
    # hashes chain through it) can be hit only by its own request, and only after a
    # preemption.  Registering it would change nothing observable (no KV events, no host
    # tier), so it is not registered as it fills: a preemption registers the request's
    # private blocks before freeing them, and from then on the request registers every block
    # as it fills.  The map holds the same hashes at every lookup either way.
    def wants_shared_block_ids(self) -> bool:
        pool = self.pool
        return (self.caching and self.spec is None and not self._belady and self.host is None
                and pool.on_event is None and pool.on_evict is None and (pool.compiled or pool._lru))

    def use_shared_block_ids(self, shared: AbstractSet[int]) -> None:
        self._shared = shared if self.wants_shared_block_ids() else None

    def _private_from(self, req: Request) -> int:
        """The request's first block whose unit id no other request lists (see above)."""
        shared = self._shared
        k = 0
        for ids in (req.hash_ids, req.output_hash_ids):
            for bid in ids:
                if bid not in shared:
                    return k * req.block_size // self.bs
                k += 1
        # Generated units: ids unique to the request, unless the workload lists such ids.
        if OUTPUT_ID_BASE in shared:  # a marker: some listed id lies in the generated range
            n_ids = len(req.hash_ids)
            while output_block_id(req.index, k - n_ids) in shared:
                k += 1
        return k * req.block_size // self.bs

    def _admit_ready(self, now: float) -> None:
        """Disaggregated decode: requests whose prompt KV arrived join the running requests.

        FCFS while seats and blocks allow (blocks for the whole prompt, prefix-cache hits
        reused, as vLLM's KV-connector path allocates them); the first that does not fit
        waits.  No pass runs: the first token (sampled by the prefill worker) is emitted
        at admission.
        """
        taken: list[VReq] = []
        while self.ready and len(self.running) < self.max_seqs:
            vr = self.ready[0]
            hit = self._lookup(vr)
            if not self._allocate_new(vr, hit, vr.num_tokens - hit * self.bs):
                break
            self.ready.popleft()
            vr.admitted_once = True
            self.prompt_tokens += vr.req.input_length
            self.cached_prompt_tokens += hit * self.bs
            vr.computed = vr.num_tokens
            vr.generated = 1
            vr.num_tokens += 1
            self.running.append(vr)
            taken.append(vr)
        if taken:
            self.rec.emit(np.array([vr.req.index for vr in taken], dtype=np.int64), now)
            self._finish_done(taken, now)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.ready)

    def transfers_waiting(self) -> int:
        return len(self.ready)

    def queue_counts(self) -> tuple[int, int]:
        return len(self.waiting) + len(self.ready), len(self.running)

    # -- blocks (the block-KV manager, blockkv/manager.py, does the work) ---------------------
    def _cache_blocks(self, vr: VReq, upto: int) -> None:
        """Register the request's full blocks among its first ``upto`` tokens (allocate_slots)."""
        if not self.caching:
            return
        n_full = min(upto, vr.num_tokens) // self.bs
        if n_full > vr.n_cached:
            self._cache_full(vr, n_full)

    def _lookup(self, vr: VReq) -> int:
        """Blocks of the request's sequence found in the prefix cache (capped at num_tokens - 1)."""
        return self._cached_blocks(vr, vr.num_tokens)

    # -- allocation ---------------------------------------------------------------------------
    def _allocate(self, vr: VReq, n: int) -> bool:
        """Blocks for ``n`` more tokens of a running request; False when the pool is short."""
        bs = self.bs
        end = vr.computed + n
        if end > len(vr.blocks) * bs:
            if not self.pool.allocate_to(vr.blocks, -(-end // bs) - len(vr.blocks)):
                return False
        if self.caching and end // bs > vr.n_cached:
            self._cache_blocks(vr, end)
        return True

    def _allocate_new(self, vr: VReq, hit: int, n: int, host_hit: int = 0) -> bool:
        """Blocks for a waiting request: its cached prefix of ``hit`` blocks plus ``n`` new tokens.

        ``host_hit`` blocks after the GPU hit are loaded from the host tier: they get new
        blocks, count as computed and are registered in the prefix cache like computed ones.
        """
        pool = self.pool
        start = (hit + host_hit) * self.bs
        need = -(-(start + n) // self.bs) - hit
        taken = pool.owner_take_within(vr, vr.req.block_size, hit, need)  # _lookup extended the chain
        if taken is None:
            return False
        vr.blocks = taken
        if host_hit:  # loaded now: most recent on host before this allocation writes evictions there
            self.host.touch(self._hashes(vr, hit, hit + host_hit))
        ok = pool.allocate_to(vr.blocks, need)
        assert ok
        vr.n_cached = hit
        vr.computed = start
        self._cache_blocks(vr, vr.computed + n)
        return True

    def _host_lookup(self, vr: VReq, hit: int) -> int:
        """Blocks after the GPU hit ``hit`` found on the host tier (same cap as :meth:`_lookup`)."""
        return self._host_blocks(vr, hit, vr.num_tokens)

    def _preempt(self, vr: VReq) -> None:
        if vr.private_from < vr.n_cached:  # it may hit them when readmitted: registered now
            self._register(vr, vr.private_from, vr.n_cached)
        vr.private_from = NO_PRIVATE_BLOCKS
        self._free_blocks(vr)
        vr.computed = 0
        vr.sched = 0
        vr.n_cached = 0
        self.waiting.appendleft(vr)
        self.rec.retracted(vr.req.index)
        self.retractions += 1

    # -- scheduling -------------------------------------------------------------------------
    def schedule(self, now: float) -> PassPlan | None:
        self.pool.now = now
        if self.ready:
            self._admit_ready(now)
        budget = self.budget
        thr = self.threshold
        running = self.running
        self._loading = 0
        preempted = False
        dt = self.spec.tokens if self.spec is not None else 1  # tokens a decode verifies
        bs = self.bs
        caching = self.caching
        # Running requests first.  The leading plain decodes known from the last commit are
        # scheduled as arrays; the loop takes the rest.  A running request whose pass is one
        # sampled token is a decode (its context and remaining output collected on the way);
        # the others prefill.
        pre, pre_ctx = self._fast_decodes(budget, dt)
        m = len(pre.reqs) if pre is not None else 0
        scheduled: list[VReq] = running[:m]
        budget -= m
        prefill: list[VReq] = []
        ctx: list[int] = []
        lefts: list[int] = []
        lead = m  # leading running requests scheduled as plain decodes
        i = m
        while i < len(running) and budget > 0:
            vr = running[i]
            c = vr.computed
            n = vr.num_tokens - c
            if 0 < thr < n:
                n = thr
            if dt > 1 and n == 1 and vr.generated > 0 and budget >= dt:
                n = dt  # speculative: the k draft tokens are scheduled (and budgeted) too
            if n > budget:
                n = budget
            if n <= 0:
                i += 1
                continue
            end = c + n
            if end > len(vr.blocks) * bs or (caching and end // bs > vr.n_cached):  # else nothing to allocate
                ok = True
                while not self._allocate(vr, n):
                    victim = running.pop()
                    self._preempt(victim)
                    preempted = True
                    if victim is vr:
                        ok = False
                        break
                if not ok:
                    break
            vr.sched = n
            budget -= n
            scheduled.append(vr)
            if n == dt and c == vr.num_tokens - 1 and vr.generated > 0:
                if lead == i:
                    lead += 1
                ctx.append(c + 1)
                lefts.append(vr.max_new - vr.generated)
            else:
                prefill.append(vr)
            i += 1
        n_running_sched = len(scheduled)
        if not preempted or not scheduled:
            budget = self._admit(now, budget, scheduled)
        if not scheduled:
            self._last = None
            return None
        prefill.extend(scheduled[n_running_sched:])
        if pre is not None and len(scheduled) == m:  # only the known decodes: their arrays as they are
            idx, dctx, prefix = pre.idx, pre_ctx, pre
        else:
            idx, dctx, prefix = self._batch_arrays(scheduled, pre, pre_ctx, ctx, lefts, lead)
        batch = _VBatch(reqs=scheduled, decode_only=not prefill, preempted=preempted, idx=idx)
        if dt == 1:
            batch.prefix = prefix
        self._lazy = batch.prefix
        self._in_flight = True
        self._last = batch
        # The plan's fields are set one by one (typed when compiled): a keyword call with a
        # dict of the fields present cost about as much as the rest of a decode pass's schedule.
        plan = PassPlan()
        plan.requests = batch
        if prefill:
            plan.prefill_new = self._arith.int64_array([vr.sched for vr in prefill])
            plan.prefill_cached = self._arith.int64_array([vr.computed for vr in prefill])
        if dctx.size:
            plan.decode_ctx = dctx
            plan.decode_tokens = dt
            if not prefill:
                # Decode-only: from the prefix when it covers the batch (it is None for
                # small batches and under speculative decoding).
                whole = prefix is not None and lead == len(scheduled)
                batch.computed = prefix.computed if whole else dctx - 1
                batch.left_min = prefix.left_min if whole else min([vr.max_new - vr.generated for vr in scheduled])
        if self._loading:
            self.host_loaded_tokens += self._loading
            plan.host_load_s = self.hostlink.load_seconds(self._loading)
            plan.host_load_overlap = self.hostlink.overlap
        return plan

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
            ctx = pool.decode_pass(pre.reqs, pre.computed, self.caching, getattr(self, "_chain"))
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

    def _admit(self, now: float, budget: int, scheduled: list[VReq]) -> int:
        """The waiting loop: FCFS admission while seats, budget and blocks allow."""
        thr = self.threshold
        waiting = self.waiting
        while waiting and budget > 0 and len(self.running) < self.max_seqs:
            vr = waiting[0]
            hit = self._lookup(vr)
            hh = self._host_lookup(vr, hit) if self.host is not None else 0
            n = vr.num_tokens - (hit + hh) * self.bs
            if 0 < thr < n:
                n = thr
            if not self.chunked_prefill and n > budget:
                break
            n = min(n, budget)
            if not self._allocate_new(vr, hit, n, hh):
                break
            waiting.popleft()
            self.running.append(vr)
            cached = (hit + hh) * self.bs
            self._loading += hh * self.bs
            if not vr.admitted_once:
                vr.admitted_once = True
                self.prompt_tokens += vr.req.input_length
                self.cached_prompt_tokens += cached
            self.rec.scheduled(vr.req.index, now, cached, hh * self.bs)
            vr.sched = n
            budget -= n
            scheduled.append(vr)
        return budget

    # -- commit -----------------------------------------------------------------------------
    def complete(self, plan: PassPlan, end: float) -> None:
        self.pool.now = end
        self._in_flight = False
        batch: _VBatch = plan.requests
        pre = batch.prefix  # the leading plain decodes: their rows advance in _next_prefix
        m = len(pre.reqs) if pre is not None else 0
        emitted: list[VReq] = []
        spec: list[VReq] = []
        for vr in batch.reqs[m:]:
            if vr.sched > 1 and vr.computed == vr.num_tokens - 1 and vr.generated > 0:
                spec.append(vr)  # a speculative decode (k drafts + 1 verified)
                continue
            vr.computed += vr.sched
            vr.sched = 0
            if vr.computed == vr.num_tokens:
                emitted.append(vr)
        if m or emitted:
            if m and not emitted:
                idx = pre.idx
            else:
                idx = self._arith.index_with(pre.idx if m else None, [vr.req.index for vr in emitted])
            self.rec.emit(idx, end)
            for vr in emitted:
                vr.generated += 1
                vr.num_tokens += 1
            if m and pre.left_min <= 1:  # leading decodes that sampled their last token
                emitted = self._finished_in_prefix(pre, 1) + emitted
            self._finish_done(emitted, end)
        if spec:
            self._complete_spec(spec, end)
        self._next_prefix(batch, 1)

    def _complete_spec(self, reqs: list[VReq], end: float) -> None:
        """Speculative decodes: each keeps its accepted drafts plus one token (never past max_new).

        Blocks were allocated for k + 1 tokens; those holding only rejected drafts are freed.
        """
        n = len(reqs)
        left = np.fromiter((vr.max_new - vr.generated for vr in reqs), dtype=np.int64, count=n)
        acc = np.minimum(self.spec.draw(n), left)
        bs = self.bs
        for vr, a in zip(reqs, acc.tolist()):
            vr.sched = 0
            vr.computed += a
            vr.generated += a
            vr.num_tokens += a
            keep = -(-vr.computed // bs)
            if len(vr.blocks) > keep:
                self.pool.free_request(vr.blocks[keep:])
                del vr.blocks[keep:]
        self.rec.emit(np.fromiter((vr.req.index for vr in reqs), dtype=np.int64, count=n), end, acc)
        self._finish_done(reqs, end)

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
        """Whether decode block events can be replayed in bulk (LRU, no KV event sink)."""
        pool = self.pool
        return pool.on_event is None and (pool.compiled or pool._lru)

    def _replay(self, reqs: list[VReq], c0: list[int] | np.ndarray, first: int, k: int) -> None:
        """Decode block events of passes ``first..k-1`` in bulk: on the compiled pool, or in Python."""
        if self.pool.compiled:
            self.pool.replay_decode(reqs, c0, first, k, self.caching, getattr(self, "_chain"))  # see _fast_decodes
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

    def _finish_done(self, reqs: list[VReq], end: float) -> None:
        done = [vr for vr in reqs if vr.generated >= vr.max_new]
        if not done:
            return
        if len(done) == 1:  # the usual case: one C scan, no set
            self.running.remove(done[0])  # by identity: the class defines no equality
        else:
            gone = set(done)
            self.running = [vr for vr in self.running if vr not in gone]
        for vr in done:
            self._finish_owner(vr, end, "output cut at max_model_len", vr.max_new < vr.req.output_length)

    # -- abort ---------------------------------------------------------------------------------
    def abort(self, index: int, now: float, reason: str = "cancelled by the client") -> bool:
        """vLLM's ``finish_requests`` with an aborted status, between engine steps.

        The request leaves whichever queue holds it (waiting, running, or the transferred-KV
        queue of disaggregated decode); a running one frees its blocks tail first as a
        finished request does, so its registered full blocks stay in the prefix cache as
        free, evictable blocks.  The leading-decode arrays are written back and dropped (the
        next schedule rebuilds them), and no decode stretch follows the change.
        """
        assert not self._in_flight, "vLLM model: abort while a pass is in flight"
        for queue in (self.waiting, self.ready):
            for vr in queue:
                if vr.req.index == index:
                    queue.remove(vr)  # by identity: the class defines no equality
                    self._cancel(vr.req, now, reason)
                    return True
        for vr in self.running:
            if vr.req.index == index:
                self._drop_lazy()
                self._prefix = None
                self._last = None
                self.running.remove(vr)
                self.pool.now = now
                self._free_blocks(vr)
                vr.n_cached = 0
                self._cancel(vr.req, now, reason)
                return True
        return False

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
            first_alloc = (-(c + 1)) % bs + 1
            m = first_alloc
            if self.caching:
                m = np.minimum(m, (-(c + 2)) % bs + 1)
            limit = min(limit, int(m.min()))
        return self._arith.stretch_within_free_blocks(c, bs, self.pool.num_free_blocks, limit)

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

    def snapshot(self) -> EngineSnapshot:
        outstanding = sum(vr.num_tokens - vr.computed + vr.max_new - vr.generated for vr in self.waiting)
        lazy = self._lazy
        m = len(lazy.reqs) if lazy is not None else 0
        if m:
            outstanding += int(lazy.left.sum())
        outstanding += sum(vr.max_new - vr.generated for vr in self.running[m:])
        return self._kv_snapshot(len(self.running), len(self.waiting), outstanding)

    def check_invariants(self) -> None:
        """Block conservation: every reference the pool counts is held by a running request."""
        pool = self.pool
        pool.check_invariants()
        assert len(self.running) <= self.max_seqs
        held = 0
        lazy = self._lazy
        progress = self.running_progress()
        assert [p[0] for p in progress] == self.running
        for j, (vr, computed, sched, generated) in enumerate(progress):
            assert len(vr.blocks) == -(-(computed + sched) // self.bs), (vr.req.index, len(vr.blocks))
            if self.caching and self.spec is None:  # the decode fast path relies on this
                assert vr.n_cached == (computed + sched) // self.bs, (vr.req.index, vr.n_cached)
            assert computed + sched <= vr.req.input_length + generated
            assert generated <= vr.max_new
            if lazy is None or j >= len(lazy.reqs):
                assert vr.num_tokens == vr.req.input_length + vr.generated
            assert all(pool.refs[b] >= 1 for b in vr.blocks)
            held += len(vr.blocks)
        for vr in self.waiting:
            assert not vr.blocks and vr.computed == 0 and vr.sched == 0
        pre = self._prefix
        if pre is not None:  # the leading running requests, and plain decodes
            assert pre is lazy
            assert self.running[:len(pre.reqs)] == pre.reqs
            assert pre.idx.tolist() == [vr.req.index for vr in pre.reqs]
            assert all(c == vr.req.input_length + g - 1 and g > 0 for vr, c, _, g in progress[:len(pre.reqs)])
            if not self._bulk_replay():  # then written back at every commit
                assert all((vr.computed, vr.generated) == (c, g) for vr, c, _, g in progress[:len(pre.reqs)])
        self._check_blocks(held)
