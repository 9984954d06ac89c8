"""TensorRT-LLM's in-flight batching scheduler and KV block manager, as a model.

(Longer than 600 lines because the capacity scheduler, the micro-batch scheduler, batch
waiting and the decode stretches read the same request records and are compiled as one
module; the block-KV work is the shared manager's, ``engines/blockkv/manager.py``.)

Follows TensorRT-LLM's batch manager as read in its 2025 main branch
(``capacityScheduler.cpp``, ``microBatchScheduler.cpp``, ``kvCacheManager.cpp``; the
PyTorch backend wraps the same schedulers); docs/engines.md lists what is modelled and
what is left out.  In short, every iteration:

* The capacity scheduler picks the requests that may run, walking the active requests in
  arrival order, at most ``max_batch_size``:

  - GUARANTEED_NO_EVICT: requests already generating always run and keep a reservation
    of the blocks they still need to reach their maximum length; a request still in its
    context phase is admitted only if its own remaining blocks to completion
    (``ceil((prompt + max output) / tokens_per_block)`` minus the blocks it holds; prefix
    reuse is not subtracted) fit in what is left; the first that does not fit stops
    admission.  Nothing is ever evicted.
  - MAX_UTILIZATION: a request is admitted if the blocks its next step needs fit (its
    whole prompt for a context not started yet, one block when a generation step opens
    one).  When one does not fit, the most recently arrived *started* request behind it
    is paused (its KV is freed; it later recomputes prompt and output so far from its
    place in the arrival order) and the check is retried.

* The micro-batch scheduler walks the admitted requests in order under ``max_num_tokens``:
  a generation step costs one token, a context costs its remaining prompt.  With chunked
  context on, contexts are chunked afterwards from the tokens the generation steps left,
  first come first served, a truncated chunk rounded down to whole blocks.  Context and
  generation requests share an iteration.
* A context request gets blocks for its whole prompt when it is first scheduled, reusing
  cached full blocks of its prefix (at least the last prompt token is recomputed).  Its
  prompt blocks are registered for reuse when its context completes, generated blocks
  when it finishes; freed blocks stay reusable until an allocation recycles them.
* The iteration that completes a context samples the request's first token.
* Batch waiting (``batch_wait_timeout_iters`` / ``batch_wait_max_tokens_ratio``, off by
  default; PyExecutor ``_schedule`` / ``_waiting_requests`` in
  ``tensorrt_llm/_torch/pyexecutor/py_executor.py``, 1.1-1.2): when the schedulers chose
  both context and generation requests, the contexts are held back (the generation steps
  still run) unless the iteration's tokens — each chosen context counted at its whole
  prompt, each generation step at ``1 + drafts`` — reach ``ratio × max_num_tokens``, or
  ``timeout_iters`` iterations have been held since the contexts last ran.  One counter
  per executor: it advances in each held iteration, restarts when the contexts run, and is
  left alone in iterations without contexts or without generation.  So it is on only with
  both values above 0 (a zero timeout releases at once, a zero ratio is always reached).
  The executor skips it with attention DP (engines/attention_dp.py turns it off per rank).
* Speculative decoding (MTP / EAGLE one-model, ``deployment.speculative``): a generation
  step verifies its token plus ``k`` drafts, costs ``k + 1`` tokens of ``max_num_tokens``
  and adds ``k + 1`` KV slots (capped at the tokens the request may still produce, so the
  no-evict reservation to ``prompt + max output`` is unchanged); after the step the KV of
  rejected drafts is rewound and blocks holding only them are freed.

Simulator rules (not TensorRT-LLM's): a prompt with no room for one output token within
``max_seq_len`` (capped at the KV pool) is rejected, and output is cut there; with chunked
context off a prompt above ``max_num_tokens`` is rejected, and a paused request whose
recomputation exceeds ``max_num_tokens`` runs when it is first in an otherwise empty
iteration.
"""

from __future__ import annotations

import numpy as np

from servesim.engines.base import EngineLimits, EngineSnapshot
from servesim.engines.blockkv.arithmetic import stretch_block_events
from servesim.engines.blockkv.manager import BlockKVEngine
from servesim.engines.trtllm.options import TRTLLMOptions
from servesim.errors import ConfigError
from servesim.kvcache.block_owner import BlockOwner
from servesim.kvcache.block_pool import block_list
from servesim.metrics.recorder import RequestRecorder
from servesim.perf.plan import PassPlan
from servesim.workload.request import Request


class TReq(BlockOwner):
    """Engine-side state of one request; its blocks, unit chain and registered blocks are the
    :class:`~servesim.kvcache.block_owner.BlockOwner` fields the block-KV manager works on.

    (Plain classes here, not dataclasses: engines/trtllm/scheduler.pxd types them when the
    module is compiled.)
    """

    __slots__ = ("max_new", "ctx_len", "target", "generated", "computed", "sched", "context", "hit", "host_hit",
                 "admitted_once")

    def __init__(self, req: Request, max_new: int, ctx_len: int, target: int = 0) -> None:
        self._own(req)  # BlockOwner's fields
        self.max_new = max_new
        #: Tokens the context phase computes: the prompt, plus output so far after a pause.
        self.ctx_len = ctx_len
        #: Blocks the request holds at its maximum length, ``ceil((prompt + max_new) / block)``:
        #: what GUARANTEED_NO_EVICT reserves (fixed for the request's life).
        self.target = target
        self.generated = 0
        self.computed = 0
        #: Context tokens computed in the iteration in flight (a generation step always computes
        #: ``1 + drafts`` tokens and does not record them here).
        self.sched = 0
        self.context = True
        #: Reusable prefix blocks found for the next first chunk (set while scheduling), and
        #: blocks after them found on the host tier.
        self.hit = 0
        self.host_hit = 0
        self.admitted_once = False

    def __repr__(self) -> str:
        return (f"TReq(index={self.req.index}, max_new={self.max_new}, ctx_len={self.ctx_len}, "
                f"generated={self.generated}, computed={self.computed}, context={self.context}, "
                f"blocks={len(self.blocks)})")


# Per-pass columns of a list of requests.  Written as index loops into a fresh array: compiled
# (engines/trtllm/scheduler.pxd) the array is a typed C view and each request a C struct, so a batch of
# tens of requests costs well under a microsecond.
def _indices(reqs: list[TReq]) -> np.ndarray:
    """Recorder rows of ``reqs``, in order."""
    out = np.empty(len(reqs), dtype=np.int64)
    view = out
    for i in range(len(reqs)):
        tr = reqs[i]
        view[i] = tr.req.index
    return out


def _decode_contexts(gens: list[TReq]) -> np.ndarray:
    """Each generation step's context length (its token included)."""
    out = np.empty(len(gens), dtype=np.int64)
    view = out
    for i in range(len(gens)):
        tr = gens[i]
        view[i] = tr.computed + 1
    return out


def _context_chunks(contexts: list[TReq]) -> tuple[np.ndarray, np.ndarray]:
    """Each context chunk's new tokens and the tokens computed before it."""
    new = np.empty(len(contexts), dtype=np.int64)
    cached = np.empty(len(contexts), dtype=np.int64)
    vnew = new
    vcached = cached
    for i in range(len(contexts)):
        tr = contexts[i]
        vnew[i] = tr.sched
        vcached[i] = tr.computed
    return new, cached


class _TBatch:
    """A scheduled iteration's context and generation requests."""

    __slots__ = ("contexts", "gens", "context_fit", "paused", "held")

    def __init__(self, contexts: list[TReq], gens: list[TReq], context_fit: bool, paused: bool,
                 held: bool = False) -> None:
        self.contexts = contexts
        self.gens = gens
        #: Whether the capacity scheduler let any context request through, and paused any.
        self.context_fit = context_fit
        self.paused = paused
        #: Whether batch waiting held back the context requests the schedulers chose.
        self.held = held


class TRTLLMEngine(BlockKVEngine):
    """One TensorRT-LLM executor (one tensor-parallel group)."""

    name = "trtllm"
    supports_speculative = True

    def __init__(self, worker_id: int, recorder: RequestRecorder, limits: EngineLimits,
                 options: TRTLLMOptions, oracle=None) -> None:
        super().__init__(worker_id, recorder, limits)
        self.opt = options
        # Block reuse is TensorRT-LLM's name for prefix caching (``self.caching``).
        self._init_blocks("trtllm", limits, options.tokens_per_block, 0, options.eviction_policy,
                          options.enable_block_reuse, "enable_block_reuse", "block reuse", oracle,
                          options.host_kv_gb, options.host_link_gbs, options.host_load_overlap)
        bs = self.bs
        self.max_batch = options.max_batch_size
        self.max_tokens = options.max_num_tokens
        self.chunking = options.enable_chunked_context
        self.no_evict = options.capacity_scheduler_policy == "GUARANTEED_NO_EVICT"
        self.max_seq_len = options.max_seq_len or limits.context_length
        self.max_len = min(self.max_seq_len, self.capacity)
        if self.chunking and self.max_tokens < bs:
            raise ConfigError(
                f"engine.max_num_tokens: {self.max_tokens} is smaller than tokens_per_block {bs}; chunked "
                "context cuts chunks in whole blocks, so no truncated chunk could ever be scheduled")
        #: Requests not finished, in arrival order (TensorRT-LLM's active request list).
        self.active: list[TReq] = []
        self._last: _TBatch | None = None
        #: Disaggregated decode: requests whose prompt KV arrived, awaiting admission.
        self.ready: list[TReq] = []
        #: Batch waiting (PyExecutor _waiting_requests): on when either value is above 0, as
        #: TensorRT-LLM enables it; the counter of iterations held since contexts last ran.
        self.batch_wait = options.batch_wait_timeout_iters > 0 or options.batch_wait_max_tokens_ratio > 0
        self.batch_wait_timeout = options.batch_wait_timeout_iters
        self.batch_wait_tokens = options.batch_wait_max_tokens_ratio * self.max_tokens
        self.batch_wait_count = 0
        #: Set by _capacity: how many leading requests of its list are generation steps.
        self._lead_gens = 0

    def _host_lookup(self, tr: TReq) -> int:
        """Blocks after the GPU hit ``tr.hit`` found on the host tier (same cap as :meth:`_lookup`)."""
        return self._host_blocks(tr, tr.hit, tr.ctx_len)

    # -- arrivals -------------------------------------------------------------------------
    def add_request(self, req: Request, now: float, kv_ready: int = 0) -> None:
        if self._reject_unfit(req, now, self.max_seq_len, "max_seq_len"):
            return
        n = req.input_length
        if not self.chunking and n > self.max_tokens and not kv_ready:  # (no context phase when transferred)
            self._reject(req, now, f"prompt exceeds max_num_tokens {self.max_tokens} with chunked context off")
            return
        max_new = max(1, min(req.output_length, self.max_len - n))
        tr = TReq(req=req, max_new=max_new, ctx_len=n, target=self._blocks_for(n + max_new))
        if kv_ready:  # disaggregated decode: admitted by _admit_ready, no context phase
            self.ready.append(tr)
            return
        self.active.append(tr)

    def _admit_ready(self, now: float) -> None:
        """Disaggregated decode: requests whose prompt KV arrived start generating.

        FCFS while the batch has room and the capacity policy allows: under
        GUARANTEED_NO_EVICT the request's blocks to completion must fit beside the
        reservations of the requests already holding KV; under MAX_UTILIZATION its prompt
        blocks must be free.  Prompt blocks reuse cached prefix blocks.  No pass runs: the
        first token (sampled by the prefill worker) is emitted at admission.
        """
        taken: list[TReq] = []
        for tr in self.ready:
            if len(self.active) >= self.max_batch:
                break
            free = self.pool.num_free_blocks
            if self.no_evict:
                reserved = sum(self._remaining_to_completion(a) for a in self.active if a.blocks)
                if tr.target > free - reserved:
                    break
            elif self._blocks_for(tr.ctx_len) > free:
                break
            hit = self._lookup(tr)
            tr.blocks = self.pool.chain_take(tr.chain, tr.req.block_size, hit) if hit else block_list()
            tr.forget_prefix()  # the lookup remembered on the request (kvcache/_lru_core.pyx:owner_prefix)
            ok = self.pool.allocate_to(tr.blocks, self._blocks_for(tr.ctx_len) - len(tr.blocks))
            assert ok, "TensorRT-LLM model: transferred KV admitted without free blocks"
            tr.n_cached = hit
            tr.admitted_once = True
            self.prompt_tokens += tr.req.input_length
            self.cached_prompt_tokens += hit * self.bs
            tr.computed = tr.ctx_len
            tr.context = False
            tr.generated = 1
            self._cache_blocks(tr, tr.computed)
            self.active.append(tr)
            taken.append(tr)
        if taken:
            del self.ready[:len(taken)]
            self.rec.emit(_indices(taken), now)
            self._finish_done(taken, now)

    def has_work(self) -> bool:
        return bool(self.active or self.ready)

    def transfers_waiting(self) -> int:
        return len(self.ready)

    def queue_counts(self) -> tuple[int, int]:
        """Active requests, started (holding blocks) or not, and transferred ones waiting."""
        running = 0
        for tr in self.active:
            running += 1 if tr.blocks else 0
        return len(self.active) - running + len(self.ready), running

    # -- blocks ---------------------------------------------------------------------------
    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.bs)

    def _drafts(self) -> int:
        """Draft tokens each generation step verifies besides its own token (0 without speculation)."""
        return self.spec.k if self.spec is not None else 0

    def _remaining_to_completion(self, tr: TReq) -> int:
        return tr.target - len(tr.blocks)

    def _spec_kv_end(self, tr: TReq, drafts: int) -> int:
        """KV length a speculative step needs: its token and drafts, never past prompt + max_new.

        TensorRT-LLM adds ``drafts + 1`` tokens per step to the sequence, capped by the new
        tokens the request may still produce (kvCacheManager getNeededBlocksOneStep).
        """
        return tr.computed + min(drafts + 1, tr.max_new - tr.generated + 1)

    def _one_step(self, tr: TReq) -> int:
        if tr.context:
            return self._blocks_for(tr.ctx_len) - len(tr.blocks) if not tr.blocks else 0
        d = self._drafts()
        if d:
            return max(self._blocks_for(self._spec_kv_end(tr, d)) - len(tr.blocks), 0)
        return 1 if tr.computed % self.bs == 0 else 0

    # Lookup and registration: the block-KV manager (blockkv/manager.py) does the work.
    def _lookup(self, tr: TReq) -> int:
        """Reusable blocks of the request's context (capped at ``ctx_len - 1``)."""
        return self._cached_blocks(tr, tr.ctx_len)

    def _cache_blocks(self, tr: TReq, upto: int) -> None:
        """Register the request's full blocks among its first ``upto`` tokens."""
        if self.caching:
            self._cache_full(tr, upto // self.bs)

    def _alloc_gen(self, tr: TReq) -> None:
        d = self._drafts()
        if d:  # KV slots for the last token and its drafts (rewound after verification)
            need = self._blocks_for(self._spec_kv_end(tr, d)) - len(tr.blocks)
            if need > 0:
                ok = self.pool.allocate_to(tr.blocks, need)
                assert ok, "TensorRT-LLM model: speculative step without free blocks"
            return
        if tr.computed % self.bs == 0:
            ok = self.pool.allocate_to(tr.blocks, 1)
            assert ok, "TensorRT-LLM model: generation step without a free block"

    def _alloc_gens(self, gens: list[TReq]) -> None:
        """:meth:`_alloc_gen` for each generation step, in order.

        Without speculation a step needs a block exactly when its position opens one; with
        the pool's LRU fast path (no event sinks) the blocks are taken in one call — the same
        blocks, in the same order, as one call per request.
        """
        pool = self.pool
        if self.spec is not None or not pool.lru_fast_path:
            for tr in gens:
                self._alloc_gen(tr)
            return
        bs = self.bs
        self._give_blocks([tr for tr in gens if tr.computed % bs == 0])

    def _give_blocks(self, owners: list[TReq]) -> None:
        """One fresh block for each entry of ``owners`` (a request may appear more than once),
        taken in one allocation: the pool's LRU fast path makes that the same blocks, in the
        same order, as one allocation per entry."""
        if owners:
            got = self.pool.allocate(len(owners))
            assert got is not None, "TensorRT-LLM model: generation step without a free block"
            for tr, b in zip(owners, got):
                tr.blocks.append(b)

    def _release(self, tr: TReq) -> None:
        self._free_blocks(tr)
        tr.n_cached = 0

    def _pause(self, tr: TReq) -> None:
        """MAX_UTILIZATION: free the request's KV; it restarts with its output as prompt."""
        self._release(tr)
        tr.computed = 0
        tr.sched = 0
        tr.context = True
        tr.ctx_len = tr.req.input_length + tr.generated
        self.rec.retracted(tr.req.index)
        self.retractions += 1

    # -- scheduling -------------------------------------------------------------------------
    def _capacity(self) -> tuple[list[TReq], bool]:
        """The capacity scheduler: requests allowed to run this iteration, and whether any was paused."""
        if self.no_evict:
            # Generating requests first (the first max_batch of them, in arrival order), each
            # reserving its blocks to completion; then contexts while their reservations fit.
            active = self.active
            fitting = [tr for tr in active if not tr.context]
            if len(fitting) > self.max_batch:
                del fitting[self.max_batch:]
            self._lead_gens = len(fitting)
            if len(fitting) == len(active) or len(fitting) >= self.max_batch:
                return fitting, False
            reserved = 0  # blocks the generating requests still reserve to completion
            for tr in fitting:
                reserved += tr.target - len(tr.blocks)
            available = self.pool.num_free_blocks - reserved
            for tr in active:
                if not tr.context:
                    continue
                if len(fitting) >= self.max_batch:
                    break
                need = self._remaining_to_completion(tr)
                if need > available:
                    break
                fitting.append(tr)
                available -= need
            return fitting, False
        self._lead_gens = 0
        fitting = []
        free = self.pool.num_free_blocks
        reqs = list(self.active)
        paused = False
        i = 0
        while i < len(reqs) and len(fitting) < self.max_batch:
            tr = reqs[i]
            need = self._one_step(tr)
            if need <= free:
                fitting.append(tr)
                free -= need
                i += 1
                continue
            victim = None
            for j in range(len(reqs) - 1, i, -1):
                if reqs[j].blocks:
                    victim = j
                    break
            if victim is None:
                break
            v = reqs.pop(victim)
            before = self.pool.num_free_blocks
            self._pause(v)
            free += self.pool.num_free_blocks - before
            paused = True
        return fitting, paused

    def schedule(self, now: float) -> PassPlan | None:
        self.pool.now = now
        if self.ready:
            self._admit_ready(now)
        fitting, paused = self._capacity()
        budget = self.max_tokens
        step_tokens = 1 + self._drafts()  # a generation step verifies its drafts too
        # The leading generation steps cost step_tokens each: take as many as the budget
        # allows at once (the walk below would stop at the first that does not fit).
        lead = self._lead_gens
        n_take = min(lead, budget // step_tokens, self.max_batch)
        gens: list[TReq] = fitting[:n_take]
        tokens = n_take * step_tokens
        count = n_take
        tentative: list[TReq] = []
        contexts: list[TReq] = []
        context_fit = False
        rest = fitting[lead:] if n_take == lead and count < self.max_batch else ()
        for tr in rest:
            if tr.context:
                context_fit = True
                if not tr.blocks:
                    tr.hit = self._lookup(tr)
                    tr.host_hit = self._host_lookup(tr)
                    start = (tr.hit + tr.host_hit) * self.bs
                else:
                    start = tr.computed
                rem = tr.ctx_len - start
                if self.chunking:
                    tentative.append(tr)
                else:
                    if tokens + rem > budget and tokens > 0:
                        break
                    tr.sched = rem
                    tokens += rem
                    contexts.append(tr)
            else:
                if tokens + step_tokens > budget:
                    break
                tokens += step_tokens
                gens.append(tr)
            count += 1
            if count >= self.max_batch:
                break
        if tentative:
            cap = budget - tokens
            for tr in tentative:
                start = (tr.hit + tr.host_hit) * self.bs if not tr.blocks else tr.computed
                rem = tr.ctx_len - start
                chunk = min(rem, cap)
                if chunk < rem:
                    chunk = (chunk // self.bs) * self.bs
                if chunk <= 0:
                    continue
                tr.sched = chunk
                cap -= chunk
                contexts.append(tr)
        held = False
        if self.batch_wait and contexts and gens:
            held = self._hold_contexts(contexts, len(gens) * step_tokens)
            if held:
                for tr in contexts:
                    tr.sched = 0
                contexts = []
        if not contexts and not gens:
            self._last = None
            return None
        # Prefix hits are taken first so that allocations cannot recycle them.
        new_ctx = [tr for tr in contexts if not tr.blocks]
        loading = 0
        for tr in new_ctx:
            tr.blocks = self.pool.chain_take(tr.chain, tr.req.block_size, tr.hit) if tr.hit else block_list()
            tr.forget_prefix()
            tr.n_cached = tr.hit
            tr.computed = (tr.hit + tr.host_hit) * self.bs
            if tr.host_hit:
                self.host.touch(self._hashes(tr, tr.hit, tr.hit + tr.host_hit))
                loading += tr.host_hit * self.bs
        for tr in new_ctx:
            ok = self.pool.allocate_to(tr.blocks, self._blocks_for(tr.ctx_len) - len(tr.blocks))
            assert ok, "TensorRT-LLM model: context admitted without free blocks"
            if not tr.admitted_once:
                tr.admitted_once = True
                self.prompt_tokens += tr.req.input_length
                self.cached_prompt_tokens += tr.computed
            self.rec.scheduled(tr.req.index, now, tr.computed, tr.host_hit * self.bs)
            tr.hit = 0
            tr.host_hit = 0
        self._alloc_gens(gens)
        batch = _TBatch(contexts=contexts, gens=gens, context_fit=context_fit, paused=paused, held=held)
        self._last = batch
        kw = {}
        if contexts:
            kw["prefill_new"], kw["prefill_cached"] = _context_chunks(contexts)
        if gens:
            kw["decode_ctx"] = _decode_contexts(gens)
            kw["decode_tokens"] = step_tokens
        if loading:
            self.host_loaded_tokens += loading
            kw["host_load_s"] = self.hostlink.load_seconds(loading)
            kw["host_load_overlap"] = self.hostlink.overlap
        return PassPlan(requests=batch, **kw)

    def _hold_contexts(self, contexts: list[TReq], gen_tokens: int) -> bool:
        """Batch waiting: True if this iteration's context requests wait (the counter advances).

        The iteration's tokens count each chosen context at its whole sequence (TensorRT-LLM
        counts ``get_tokens``, the prompt, not the chunk) and each generation step at its
        token and drafts.  The contexts run, and the counter restarts, once the counter has
        reached ``batch_wait_timeout_iters`` or the tokens ``ratio × max_num_tokens``.
        """
        tokens = sum(tr.ctx_len for tr in contexts) + gen_tokens
        if self.batch_wait_count >= self.batch_wait_timeout or tokens >= self.batch_wait_tokens:
            self.batch_wait_count = 0
            return False
        self.batch_wait_count += 1
        return True

    # -- commit -----------------------------------------------------------------------------
    def complete(self, plan: PassPlan, end: float) -> None:
        self.pool.now = end
        batch: _TBatch = plan.requests
        emitted: list[TReq] = []
        for tr in batch.contexts:
            tr.computed += tr.sched
            tr.sched = 0
            if tr.computed >= tr.ctx_len:
                tr.context = False
                self._cache_blocks(tr, tr.computed)
                emitted.append(tr)
        speculative = self.spec is not None and batch.gens
        if not speculative:
            for tr in batch.gens:
                tr.computed += 1
            emitted.extend(batch.gens)
        if emitted:
            self.rec.emit(_indices(emitted), end)
            for tr in emitted:
                tr.generated += 1
            self._finish_done(emitted, end)
        if speculative:
            self._complete_spec(batch.gens, end)

    def _complete_spec(self, gens: list[TReq], end: float) -> None:
        """Speculative generation steps: each keeps its accepted drafts plus one token.

        Never past ``max_new``.  KV was written for the token and all its drafts; the
        slots of rejected drafts are rewound, freeing blocks that held only them.
        """
        n = len(gens)
        left = np.fromiter((tr.max_new - tr.generated for tr in gens), dtype=np.int64, count=n)
        acc = np.minimum(self.spec.draw(n), left)
        for tr, a in zip(gens, acc.tolist()):
            tr.computed += a
            tr.generated += a
            keep = self._blocks_for(tr.computed)
            if len(tr.blocks) > keep:
                self.pool.free_request(tr.blocks[keep:])
                del tr.blocks[keep:]
        self.rec.emit(_indices(gens), end, acc)
        self._finish_done(gens, end)

    def complete_stretch(self, plan: PassPlan, ends: np.ndarray) -> None:
        """Commit ``ends.size`` identical generation iterations, replaying block allocations in order."""
        batch: _TBatch = plan.requests
        reqs = batch.gens
        k = int(ends.size)
        bs = self.bs
        n = len(reqs)
        c0 = [0] * n
        for j in range(n):
            tr = reqs[j]
            c0[j] = tr.computed
        # Pass s (1..k-1; pass 0 allocated in schedule) opens a block for request j when
        # c0[j] + s is a multiple of the block size; keys s * n + j sorted: passes in order,
        # requests in batch order within a pass, as a pass-by-pass run allocates them.
        keys = stretch_block_events(c0, k, bs, caching=False)
        pool = self.pool
        if pool.lru_fast_path:  # pool.now is unused: all the stretch's blocks in one call
            self._give_blocks([reqs[key % n] for key in keys])
        else:
            for key in keys:
                s, j = divmod(key, n)
                tr = reqs[j]
                tr.computed = c0[j] + s
                pool.now = float(ends[s - 1])
                self._alloc_gen(tr)
        pool.now = float(ends[-1])
        for j in range(n):
            tr = reqs[j]
            tr.computed = c0[j] + k
            tr.generated += k
        if batch.held:  # the passes after the first held their contexts too
            self.batch_wait_count += k - 1
            assert self.batch_wait_count <= self.batch_wait_timeout, "batch waiting: a stretch ran past a release"
        self.rec.emit_stretch(_indices(reqs), ends)
        self._finish_done(reqs, float(ends[-1]))

    def _finish_done(self, reqs: list[TReq], end: float) -> None:
        done = []
        for tr in reqs:
            if tr.generated >= tr.max_new:
                done.append(tr)
        if not done:
            return
        gone = set(done)  # by identity: the class defines no equality
        self.active = [tr for tr in self.active if tr not in gone]
        for tr in done:
            self._cache_blocks(tr, tr.computed)
            tr.n_cached = 0
            self._finish_owner(tr, end, "output cut at max_seq_len", tr.max_new < tr.req.output_length)

    # -- abort ---------------------------------------------------------------------------------
    def abort(self, index: int, now: float, reason: str = "cancelled by the client") -> bool:
        """An aborted request leaves the active list (or the transferred-KV queue) between
        iterations, as the executor terminates a cancelled request.

        Its full blocks whose KV exists (all of a generating request, the computed chunks of a
        context) are registered for reuse and every block is freed, as at a finish: the cached
        ones stay in the pool, evictable.  No decode stretch follows the change.
        """
        for tr in self.ready:
            if tr.req.index == index:
                self.ready.remove(tr)  # by identity: the class defines no equality
                self._cancel(tr.req, now, reason)
                return True
        for tr in self.active:
            if tr.req.index == index:
                self.active.remove(tr)
                self._last = None
                self.pool.now = now
                if tr.blocks:
                    self._cache_blocks(tr, tr.computed)
                self._release(tr)
                self._cancel(tr.req, now, reason)
                return True
        return False

    # -- fast-forward -------------------------------------------------------------------------
    def decode_stretch_limit(self) -> int:
        """Generation iterations that will repeat unchanged: no admission, pause, finish or failed allocation."""
        batch = self._last
        if batch is None or batch.contexts or batch.paused or self.ready:
            return 1
        if batch.context_fit and not self._held_stays_held(batch):
            return 1
        if self.spec is not None:  # accepted lengths vary pass by pass
            return 1
        gens = batch.gens
        n = len(gens)
        if n == 0:
            return 1
        if n != len(self.active):
            if not self.no_evict:
                return 1
            generating = 0
            for tr in self.active:
                generating += not tr.context
            if n != generating:
                return 1
        # Under GUARANTEED_NO_EVICT a context request that failed its reservation keeps
        # failing: each generation block moves one block from "free" to "held", so the
        # blocks left after the generating requests' reservations do not change.
        bs = self.bs
        c = np.empty(n, dtype=np.int64)  # each request's KV length
        view = c
        limit = 0  # the fewest output tokens any request has left
        for j in range(n):
            tr = gens[j]
            view[j] = tr.computed
            left = tr.max_new - tr.generated
            if j == 0 or left < limit:
                limit = left
        if batch.held:
            # held passes in a row, this one included: while the counter is below the timeout
            limit = min(limit, self.batch_wait_timeout - self.batch_wait_count + 1)
        return self._arith.stretch_within_free_blocks(c, bs, self.pool.num_free_blocks, limit)

    def _held_stays_held(self, batch: _TBatch) -> bool:
        """Whether passes after this one, batch waiting holding its contexts, choose the same contexts.

        Under GUARANTEED_NO_EVICT the capacity scheduler keeps choosing them (each generation
        block moves one block from free to held, so what the reservations leave is fixed) and
        the generation steps' tokens are fixed, so the micro-batch scheduler chooses the same
        contexts if their remaining prompts are fixed: true without block reuse (no prefix
        hit to shrink as generation recycles cached blocks, no host tier).  The token count
        then stays below the threshold, and only the counter moves.
        """
        return batch.held and self.no_evict and not self.caching and self.host is None

    # -- state ---------------------------------------------------------------------------------
    def snapshot(self) -> EngineSnapshot:
        running = sum(1 for tr in self.active if tr.blocks)
        outstanding = sum((tr.ctx_len - tr.computed if tr.context else 0) + tr.max_new - tr.generated
                          for tr in self.active)
        return self._kv_snapshot(running, len(self.active) - running, outstanding)

    def check_invariants(self) -> None:
        """Block conservation, and the no-evict guarantee: reservations never exceed the pool."""
        pool = self.pool
        pool.check_invariants()
        held = 0
        reserved = 0
        for tr in self.active:
            assert tr.generated <= tr.max_new
            if tr.blocks:
                if tr.context:
                    assert len(tr.blocks) == self._blocks_for(tr.ctx_len)
                    assert tr.computed < tr.ctx_len
                else:
                    assert len(tr.blocks) == self._blocks_for(tr.computed), (tr.req.index, len(tr.blocks))
                assert all(pool.blocks[b].ref >= 1 for b in tr.blocks)
                held += len(tr.blocks)
                reserved += self._remaining_to_completion(tr)
            else:
                assert tr.context and tr.computed == 0
        self._check_blocks(held)
        # batch waiting holds only while the counter is below the timeout
        assert 0 <= self.batch_wait_count <= self.batch_wait_timeout
        if self.no_evict:
            assert reserved <= pool.num_free_blocks, (reserved, pool.num_free_blocks)
