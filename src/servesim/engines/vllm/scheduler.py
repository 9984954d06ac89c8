"""vLLM v1's scheduler and hashed block pool, as a model: the reference scheduling.

The decode fast path — the leading plain decodes kept as arrays and their bulk block
replay, decode stretches — is ``fast_path.py``, whose :class:`VLLMDecodeFastPath` this
engine extends; the block-KV work itself is the shared manager's,
``engines/blockkv/manager.py``.

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

import math
from collections import deque
from collections.abc import Set as AbstractSet

import numpy as np

from servesim.engines.base import EngineLimits, EngineSnapshot
from servesim.engines.vllm.fast_path import VLLMDecodeFastPath, VReq, _VBatch
from servesim.engines.vllm.options import VLLMOptions, resolve_vllm_options
from servesim.errors import ConfigError
from servesim.kvcache.block_owner import NO_PRIVATE_BLOCKS
from servesim.metrics.recorder import RequestRecorder
from servesim.perf.plan import PassPlan
from servesim.workload.request import OUTPUT_ID_BASE, Request, output_block_id
from servesim.workload.sharing import first_unlisted


class VLLMEngine(VLLMDecodeFastPath):
    """One vLLM worker (one tensor-parallel group)."""

    name = "vllm"
    supports_speculative = True

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
        #: Disaggregated decode: requests whose prompt KV arrived, awaiting admission.
        self.ready: deque[VReq] = deque()
        self._loading = 0  # host tokens loaded for the pass being scheduled
        self._init_fast_path()
        #: The workload's shared block ids (:meth:`use_shared_block_ids`), or None: then every
        #: full block is registered as it fills.
        self._shared: AbstractSet[int] | None = None
        # Async scheduling (see :meth:`schedule`): the start of the pass in flight, which is when
        # the pass after it was chosen (inf: none chosen), the end of the last pass, and the
        # arrival time up to which the pass being chosen sees requests (inf: all of them).
        self.async_lag = bool(opt.async_scheduling)
        self._decided_at = math.inf
        self._last_end = -math.inf
        self._cutoff = math.inf

    # -- arrivals -------------------------------------------------------------------------
    def add_request(self, req: Request, now: float, kv_ready: int = 0) -> None:
        if self._reject_unfit(req, now, self.max_model_len, "max_model_len"):
            return
        n = req.input_length
        max_new = min(req.output_length, self.max_len - n)
        vr = VReq(req, max(1, max_new), n, now)
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
            j = first_unlisted(ids, shared)  # one C loop (a byte per id on dense ids)
            k += j
            if j < len(ids):
                return k * req.block_size // self.bs
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
            if vr.arrived > self._cutoff:  # async scheduling: its KV arrived after this pass's view
                break
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
        """The next pass.  With async scheduling (vLLM's default from 0.14) the engine core
        chooses pass ``k + 1`` right after launching pass ``k``, from the requests that had
        arrived by then, and runs it when pass ``k`` ends: a request that arrives while pass
        ``k`` runs joins pass ``k + 2``.  A core with nothing in flight takes a request at once,
        and one whose view found nothing to run looks again at once.  (Requests that reach their
        output length are not scheduled again: the async scheduler counts the token in flight.)"""
        if not self.async_lag:
            return self._schedule(now)
        self._cutoff = now if now > self._last_end else min(self._decided_at, now)
        plan = self._schedule(now)
        if plan is None and (self.waiting or self.ready) and self._cutoff < now:
            self._cutoff = now
            plan = self._schedule(now)
        self._decided_at = now if plan is not None else math.inf
        return plan

    def _schedule(self, now: float) -> PassPlan | None:
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
                batch.computed = prefix.computed if whole else self._arith.minus_one(dctx)
                batch.left_min = prefix.left_min if whole else min([vr.max_new - vr.generated for vr in scheduled])
        if self._loading:
            self.host_loaded_tokens += self._loading
            plan.host_load_s = self.hostlink.load_seconds(self._loading)
            plan.host_load_overlap = self.hostlink.overlap
        return plan

    def _admit(self, now: float, budget: int, scheduled: list[VReq]) -> int:
        """The waiting loop: FCFS admission while seats, budget and blocks allow."""
        thr = self.threshold
        waiting = self.waiting
        while waiting and budget > 0 and len(self.running) < self.max_seqs:
            vr = waiting[0]
            if vr.arrived > self._cutoff:  # async scheduling: not in the view this pass was chosen from
                break
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
        self._last_end = end
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

    def complete_stretch(self, plan: PassPlan, ends: np.ndarray) -> None:
        VLLMDecodeFastPath.complete_stretch(self, plan, ends)
        k = int(ends.size)
        self._last_end = ends.item(k - 1)
        if k > 1:  # the stretch's last pass was chosen when the one before it started
            self._decided_at = ends.item(k - 2)

    def input_lag_passes(self) -> int:
        """Async scheduling: the pass after the one in flight is chosen already."""
        return 1 if self.async_lag else 0

    def _unseen_waiting(self) -> bool:
        """Async scheduling: requests wait that the view this pass was chosen from did not hold;
        the next pass's view holds them."""
        return self.async_lag and bool(self.waiting) and self.waiting[-1].arrived > self._cutoff

    def decode_stretch_limit(self) -> int:
        if self._unseen_waiting():
            return 1
        return VLLMDecodeFastPath.decode_stretch_limit(self)

    def decode_stretch_plan(self) -> tuple:
        if self._unseen_waiting():  # not a head that failed on blocks: it is looked at next pass
            return 1, None
        return VLLMDecodeFastPath.decode_stretch_plan(self)

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

    # -- state ---------------------------------------------------------------------------------
    def snapshot(self) -> EngineSnapshot:
        lazy = self._lazy
        m = len(lazy.reqs) if lazy is not None else 0
        outstanding = self._outstanding(m)
        if m:
            outstanding += int(lazy.left.sum())
        return self._kv_snapshot(len(self.running), len(self.waiting), outstanding)

    def _outstanding(self, m: int) -> int:
        """Tokens the waiting requests, and the running ones after the first ``m`` (a lazy
        prefix, whose rows say), have left to compute or sample.  Plain loops, typed when
        compiled: the time series takes a snapshot every second of every worker, and the
        waiting queue of an agentic run is long."""
        total = 0
        for vr in self.waiting:
            total += vr.num_tokens - vr.computed + vr.max_new - vr.generated
        running = self.running
        for j in range(m, len(running)):
            vr = running[j]
            total += vr.max_new - vr.generated
        return total

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
