"""vLLM v1's scheduler and hashed block pool, as a model.

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
from dataclasses import dataclass, field

import numpy as np

from servesim.engines.base import Engine, EngineLimits, EngineSnapshot
from servesim.engines.blocks import stretch_block_events, stretch_within_free_blocks
from servesim.engines.host import host_link
from servesim.engines.vllm_options import VLLMOptions, resolve_vllm_options
from servesim.errors import ConfigError
from servesim.kvcache.block_pool import BlockPool
from servesim.kvcache.hashing import ROOT_HASH, block_content_ids, chain_block_hashes, unit_chain
from servesim.kvcache.host_tier import HostTier
from servesim.metrics.recorder import RequestRecorder, Status
from servesim.perf.plan import PassPlan
from servesim.workload.request import Request, sequence_units


def extend_block_hashes(req: Request, hashes: list[int], chain: list[int], n_blocks: int,
                        block_size: int) -> list[int]:
    """Extend ``hashes`` (the request's full-block hashes so far) to ``n_blocks`` blocks.

    ``chain`` caches the request's unit chain; both lists are extended in place.  The list
    is extended to the end of the trace unit holding the last block wanted (the hashes of
    one unit are one ``range``), so decoding extends it once per unit, not once per block;
    callers slice it to what they need.
    """
    have = len(hashes)
    if n_blocks > have:
        us = req.block_size
        n_blocks = max(n_blocks, ((n_blocks * block_size - 1) // us + 1) * us // block_size)
        if (n_blocks * block_size - 1) // us >= len(chain):  # the chain must reach the last unit
            units = sequence_units(req, n_blocks * block_size)
            parent = chain[-1] if chain else ROOT_HASH
            chain.extend(unit_chain(units[len(chain):], parent))
        hashes.extend(chain_block_hashes(chain, block_size, n_blocks, unit_size=us, start_block=have))
    return hashes


@dataclass(slots=True, eq=False)
class VReq:
    """Engine-side state of one request."""

    req: Request
    max_new: int
    generated: int = 0
    #: Tokens whose KV exists (vLLM's num_computed_tokens), committed at pass end.
    computed: int = 0
    #: Tokens being computed in the pass in flight.
    sched: int = 0
    blocks: list[int] = field(default_factory=list)
    #: Hashes of the sequence's full blocks known so far, and the unit chain behind them.
    hashes: list[int] = field(default_factory=list)
    chain: list[int] = field(default_factory=list)
    #: Leading blocks already registered in the prefix cache (or taken from it).
    n_cached: int = 0
    admitted_once: bool = False
    #: Prompt plus sampled tokens (vLLM's num_tokens), kept equal to input + generated.
    num_tokens: int = 0


@dataclass(slots=True)
class _VBatch:
    reqs: list[VReq]
    decode_only: bool
    preempted: bool
    #: Request indices of ``reqs`` (the recorder's rows), built once per pass.
    idx: np.ndarray | None = None
    #: For a decode-only pass: each request's computed tokens, and min(max_new - generated).
    computed: np.ndarray | None = None
    left_min: int = 0


class VLLMEngine(Engine):
    """One vLLM worker (one tensor-parallel group)."""

    name = "vllm"
    supports_speculative = True

    def __init__(self, worker_id: int, recorder: RequestRecorder, limits: EngineLimits,
                 options: VLLMOptions, oracle=None) -> None:
        super().__init__(worker_id, recorder, limits)
        opt = resolve_vllm_options(options, None, None, limits.context_length)
        self.opt = opt
        self.bs = bs = opt.block_size
        self.num_blocks = max(limits.kv_capacity_tokens // bs - 1, 0)
        self.capacity = self.num_blocks * bs
        self.pool = BlockPool(self.num_blocks, bs, policy=opt.eviction_policy, oracle=oracle,
                              enable_caching=opt.enable_prefix_caching)
        self._belady = opt.eviction_policy == "belady"
        self.budget = int(opt.max_num_batched_tokens)
        self.max_seqs = int(opt.max_num_seqs)
        self.max_model_len = int(opt.max_model_len)
        self.max_len = min(self.max_model_len, self.capacity)
        self.chunked_prefill = opt.enable_chunked_prefill
        self.threshold = opt.long_prefill_token_threshold
        self.caching = opt.enable_prefix_caching
        if not self.chunked_prefill and self.budget < self.max_model_len:
            raise ConfigError(
                f"engine.max_num_batched_tokens: {self.budget} is smaller than max_model_len "
                f"{self.max_model_len}; with enable_chunked_prefill false vLLM requires it to be at least that")
        self.waiting: deque[VReq] = deque()
        self.running: list[VReq] = []
        self.retractions = 0
        self._last: _VBatch | None = None
        #: Disaggregated decode: requests whose prompt KV arrived, awaiting admission.
        self.ready: deque[VReq] = deque()
        #: Host tier (CPU offloading): blocks recycled from the GPU cache are kept in host
        #: memory by hash (LRU); a prefix found there is loaded instead of recomputed.
        self.hostlink = host_link("vllm", opt.host_kv_gb, opt.host_link_gbs, opt.host_load_overlap,
                                  limits, granule=bs)
        self.host: HostTier | None = None
        if self.hostlink is not None:
            if not self.caching:
                raise ConfigError("deployment.engine.host_kv_gb: a host KV tier needs prefix caching; "
                                  "enable_prefix_caching is false")
            self.host = HostTier(self.hostlink.capacity_tokens // bs, bs, self.hostlink.bytes_per_token,
                                 on_event=self._host_event)
            self.pool.on_evict = self.host.store
        self.host_loaded_tokens = 0
        self._loading = 0  # host tokens loaded for the pass being scheduled

    def _host_event(self, event) -> None:
        """Host-tier events go wherever the GPU pool's events go (tier "host")."""
        sink = self.pool.on_event
        if sink is not None:
            sink(event)

    # -- arrivals -------------------------------------------------------------------------
    def add_request(self, req: Request, now: float, kv_ready: int = 0) -> None:
        n = req.input_length
        if n + 1 > self.max_model_len:
            # One reason per cause (not per length), so the summary can count them.
            self._reject(req, now, f"prompt leaves no room for output within max_model_len {self.max_model_len}")
            return
        if n + 1 > self.capacity:
            self._reject(req, now, f"prompt exceeds the KV cache of {self.capacity} tokens")
            return
        max_new = min(req.output_length, self.max_len - n)
        if kv_ready:  # disaggregated decode: admitted by _admit_ready, no prefill pass
            self.ready.append(VReq(req=req, max_new=max(1, max_new), num_tokens=n))
            return
        self.waiting.append(VReq(req=req, max_new=max(1, max_new), num_tokens=n))

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
            self.rec.emit(np.fromiter((vr.req.index for vr in taken), dtype=np.int64, count=len(taken)), now)
            self._finish_done(taken, now)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.ready)

    # -- block hashes -----------------------------------------------------------------------
    def _hashes(self, vr: VReq, n_blocks: int) -> list[int]:
        """The request's block hash list, extended to cover ``n_blocks`` full blocks."""
        return extend_block_hashes(vr.req, vr.hashes, vr.chain, n_blocks, self.bs)

    def _cache_blocks(self, vr: VReq, upto: int) -> None:
        """Register the request's full blocks among its first ``upto`` tokens (allocate_slots)."""
        if not self.caching:
            return
        n_full = min(upto, vr.num_tokens) // self.bs
        if n_full <= vr.n_cached:
            return
        hashes = self._hashes(vr, n_full)
        start = vr.n_cached
        ids = None
        if self._belady:
            ids = block_content_ids(sequence_units(vr.req, n_full * self.bs), self.bs, n_full,
                                    unit_size=vr.req.block_size, start_block=start)
        self.pool.cache_full_blocks(vr.blocks[start:n_full], hashes[start:n_full], ids)
        vr.n_cached = n_full

    def _lookup(self, vr: VReq) -> int:
        """Blocks of the request's sequence found in the prefix cache (capped at num_tokens - 1)."""
        if not self.caching:
            return 0
        cap = (vr.num_tokens - 1) // self.bs
        if cap <= 0:
            return 0
        hashes = self._hashes(vr, cap)
        return self.pool.find_cached_prefix(hashes[:cap])

    # -- allocation ---------------------------------------------------------------------------
    def _allocate(self, vr: VReq, n: int) -> bool:
        """Blocks for ``n`` more tokens of a running request; False when the pool is short."""
        bs = self.bs
        end = vr.computed + n
        if end > len(vr.blocks) * bs:
            got = self.pool.allocate(-(-end // bs) - len(vr.blocks))
            if got is None:
                return False
            vr.blocks.extend(got)
        if self.caching and end // bs > vr.n_cached:
            self._cache_blocks(vr, end)
        return True

    def _allocate_new(self, vr: VReq, hit: int, n: int, host_hit: int = 0) -> bool:
        """Blocks for a waiting request: its cached prefix of ``hit`` blocks plus ``n`` new tokens.

        ``host_hit`` blocks after the GPU hit are loaded from the host tier: they get new
        blocks, count as computed and are registered in the prefix cache like computed ones.
        """
        pool = self.pool
        hashes = vr.hashes[:hit]
        free_hits = 0
        for h in hashes:
            if pool.blocks[pool.get_cached_block(h)].ref == 0:
                free_hits += 1
        start = (hit + host_hit) * self.bs
        need = -(-(start + n) // self.bs) - hit
        if need + free_hits > pool.num_free_blocks:
            return False
        vr.blocks = pool.take_cached(hashes) if hit else []
        if host_hit:  # loaded now: most recent on host before this allocation writes evictions there
            self.host.touch(vr.hashes[hit:hit + host_hit])
        got = pool.allocate(need)
        assert got is not None
        vr.blocks.extend(got)
        vr.n_cached = hit
        vr.computed = start
        self._cache_blocks(vr, vr.computed + n)
        return True

    def _host_lookup(self, vr: VReq, hit: int) -> int:
        """Blocks after the GPU hit ``hit`` found on the host tier (same cap as :meth:`_lookup`)."""
        cap = (vr.num_tokens - 1) // self.bs
        if cap <= hit:
            return 0
        return self.host.match(self._hashes(vr, cap)[:cap], hit, touch=False)

    def _preempt(self, vr: VReq) -> None:
        self.pool.free_request(vr.blocks)
        vr.blocks = []
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
        scheduled: list[VReq] = []
        preempted = False
        dt = self.spec.tokens if self.spec is not None else 1  # tokens a decode verifies
        bs = self.bs
        caching = self.caching
        # Running requests first.  A running request whose pass is one sampled token is a
        # decode (its context and remaining output collected on the way); the others prefill.
        decode: list[VReq] = []
        prefill: list[VReq] = []
        ctx: list[int] = []
        left_min = 1 << 62
        i = 0
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
                decode.append(vr)
                ctx.append(c + 1)
                left = vr.max_new - vr.generated
                if left < left_min:
                    left_min = left
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
        idx = np.fromiter((vr.req.index for vr in scheduled), dtype=np.int64, count=len(scheduled))
        batch = _VBatch(reqs=scheduled, decode_only=not prefill, preempted=preempted, idx=idx)
        self._last = batch
        kw = {}
        if prefill:
            kw["prefill_new"] = np.fromiter((vr.sched for vr in prefill), dtype=np.int64, count=len(prefill))
            kw["prefill_cached"] = np.fromiter((vr.computed for vr in prefill), dtype=np.int64, count=len(prefill))
        if decode:
            kw["decode_ctx"] = dctx = np.array(ctx, dtype=np.int64)
            kw["decode_tokens"] = dt
            if not prefill:
                batch.computed = dctx - 1
                batch.left_min = left_min
        if self._loading:
            self.host_loaded_tokens += self._loading
            kw["host_load_s"] = self.hostlink.load_seconds(self._loading)
            kw["host_load_overlap"] = self.hostlink.overlap
        return PassPlan(requests=batch, **kw)

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
        batch: _VBatch = plan.requests
        emitted: list[VReq] = []
        spec: list[VReq] = []
        for vr in batch.reqs:
            if vr.sched > 1 and vr.computed == vr.num_tokens - 1 and vr.generated > 0:
                spec.append(vr)  # a speculative decode (k drafts + 1 verified)
                continue
            vr.computed += vr.sched
            vr.sched = 0
            if vr.computed == vr.num_tokens:
                emitted.append(vr)
        if emitted:
            idx = np.fromiter((vr.req.index for vr in emitted), dtype=np.int64, count=len(emitted))
            self.rec.emit(idx, end)
            for vr in emitted:
                vr.generated += 1
                vr.num_tokens += 1
            self._finish_done(emitted, end)
        if spec:
            self._complete_spec(spec, end)

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
        batch: _VBatch = plan.requests
        reqs = batch.reqs
        k = int(ends.size)
        # A stretch follows a decode-only pass, whose schedule recorded computed and left_min.
        c0 = batch.computed.tolist()
        # Pass s (1..k-1) computes position c0 + s of each request; at its start (the end of
        # pass s-1) it allocates a block when that position opens one, and registers a
        # block when the position fills one.
        keys = stretch_block_events(c0, k, self.bs, self.caching)
        pool = self.pool
        if pool._lru and pool.on_event is None:
            self._replay_stretch_lru(reqs, c0, k, keys)
        else:
            self._replay_stretch(reqs, c0, keys, ends)
        pool.now = float(ends[-1])
        for vr, c in zip(reqs, c0):
            vr.computed = c + k
            vr.generated += k
            vr.num_tokens += k
            vr.sched = 0
        self.rec.emit_stretch(batch.idx, ends)
        if batch.left_min <= k:  # else no request reached max_new (left_min is their minimum)
            self._finish_done(reqs, float(ends[-1]))

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

    def _replay_stretch_lru(self, reqs: list[VReq], c0: list[int], k: int, keys: list[int]) -> None:
        """The block events of a decode stretch under LRU without KV event sinks, in order.

        Same effects as calling :meth:`_allocate` per event: pass ``s`` of request ``j``
        needs its KV to cover ``c0[j] + s + 1`` tokens (one new block at a block boundary,
        taken from the head of the free queue inline) and registers every block that this
        fills.  The request's block hashes are extended once for the whole stretch instead
        of once per block.
        """
        bs = self.bs
        pool = self.pool
        caching = self.caching
        if caching:
            for j, vr in enumerate(reqs):
                n_full = (c0[j] + k) // bs
                if n_full > vr.n_cached:
                    self._hashes(vr, n_full)
        table = pool._hash_to_block
        blocks = pool.blocks
        free = pool._free
        on_evict = pool.on_evict
        cache_calls = 0
        n = len(reqs)
        for key in keys:  # s * n + j: pass s of request j (engines/blocks.py)
            s, j = divmod(key, n)
            vr = reqs[j]
            end = c0[j] + s + 1
            held = vr.blocks
            if end > len(held) * bs:  # one pass adds one token: at most one new block
                assert free, "vLLM model: decode stretch beyond the free blocks"
                b = free.popitem(last=False)[0]
                blk = blocks[b]
                h = blk.hash
                if h is not None:  # recycling a cached block evicts it
                    del table[h]
                    blk.hash = None
                    if on_evict is not None:
                        on_evict((h,))
                blk.ref = 1
                held.append(b)
            if caching:
                n_full = end // bs
                start = vr.n_cached
                if n_full > start:
                    cache_calls += 1
                    hashes = vr.hashes
                    for i in range(start, n_full):
                        b = held[i]
                        blk = blocks[b]
                        h = hashes[i]
                        if blk.hash is not None or h in table:
                            continue
                        if blk.ref <= 0:
                            raise RuntimeError(f"caching {blk!r}, which is not in use")
                        blk.hash = h
                        table[h] = b
                    vr.n_cached = n_full
        pool._seq += cache_calls  # as many logical-clock ticks as cache_full_blocks calls

    def _finish_done(self, reqs: list[VReq], end: float) -> None:
        done = [vr for vr in reqs if vr.generated >= vr.max_new]
        if not done:
            return
        gone = set(id(vr) for vr in done)
        self.running = [vr for vr in self.running if id(vr) not in gone]
        for vr in done:
            self.pool.free_request(vr.blocks)
            vr.blocks = []
            if vr.max_new < vr.req.output_length:
                self.rec.finished(vr.req.index, end, Status.COMPLETED, "output cut at max_model_len")
                self.terminated.append(vr.req)
            else:
                self._finish(vr.req, end)

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
        return stretch_within_free_blocks(c, bs, self.pool.num_free_blocks, limit)

    # -- state ---------------------------------------------------------------------------------
    def snapshot(self) -> EngineSnapshot:
        outstanding = sum(vr.num_tokens - vr.computed + vr.max_new - vr.generated for vr in self.waiting)
        outstanding += sum(vr.max_new - vr.generated for vr in self.running)
        return EngineSnapshot(
            running=len(self.running),
            waiting=len(self.waiting),
            kv_used_tokens=self.pool.num_used_blocks * self.bs,
            kv_capacity_tokens=self.capacity,
            prompt_tokens=self.prompt_tokens,
            cached_prompt_tokens=self.cached_prompt_tokens,
            outstanding_tokens=outstanding,
        )

    def check_invariants(self) -> None:
        """Block conservation: every reference the pool counts is held by a running request."""
        pool = self.pool
        pool.check_invariants()
        assert len(self.running) <= self.max_seqs
        held = 0
        for vr in self.running:
            assert len(vr.blocks) == -(-(vr.computed + vr.sched) // self.bs), (vr.req.index, len(vr.blocks))
            assert vr.computed + vr.sched <= vr.num_tokens
            assert vr.generated <= vr.max_new
            assert vr.num_tokens == vr.req.input_length + vr.generated
            assert all(pool.blocks[b].ref >= 1 for b in vr.blocks)
            held += len(vr.blocks)
        for vr in self.waiting:
            assert not vr.blocks and vr.computed == 0 and vr.sched == 0
        assert sum(b.ref for b in pool.blocks) == held, (sum(b.ref for b in pool.blocks), held)
        assert pool.num_free_blocks + pool.num_used_blocks == self.num_blocks
        if self.host is not None:
            self.host.check_invariants()
            assert self.host.size_tokens <= self.hostlink.capacity_tokens
