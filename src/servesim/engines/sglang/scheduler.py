"""SGLang's scheduler and radix cache, as a model.

Follows SGLang 0.5.6 (``managers/scheduler.py``, ``managers/schedule_policy.py``,
``managers/schedule_batch.py``, ``mem_cache/radix_cache.py``); docs/engines.md lists what
is modelled and what is left out.  In short:

* The waiting queue is FCFS, or longest-prefix-match when it holds at most 128 requests.
* Admission (SGLang's ``PrefillAdder``) takes requests in order while the token budget
  allows: free plus evictable KV, minus a reserve for the running requests' remaining
  output (capped at 4096 each) scaled by ``new_token_ratio``, minus what this pass
  already admitted (new requests are charged their full remaining output).  The first
  request that does not fit stops admission (head-of-line).  ``max_prefill_tokens`` caps a
  pass's new tokens except for its first request; a prompt above the chunk budget is
  split, at most one request is chunked at a time, and its next chunk goes first.
* A pass that admits any prefill runs prefill only (``enable_mixed_chunk`` off, the
  default); otherwise every running request decodes one token.
* ``new_token_ratio`` starts at ``0.7 x schedule_conservativeness``, falls by
  ``(init - 0.14 init) / 600`` each decode pass, resets when the worker idles and is
  recomputed after a retraction.
* When a decode pass cannot get KV even after evicting cache, the request with the
  fewest generated tokens (ties: the longest prompt) is retracted: its KV is freed, it
  goes to the back of the queue and later recomputes prompt and output.
* A finished request's prompt and output stay in the radix tree as evictable cache; a
  prompt is inserted as soon as its prefill ends so later requests can share it.
* The overlap scheduler (SGLang's default) decides each pass while the previous one runs:
  arrivals are pulled one pass later, and a running batch whose requests all finished
  decodes once more (engines/sglang/overlap.py).

This module is the reference scheduling; the running batch's decode passes, the multi-pass
decode stretches and the KV bookkeeping of a request leaving the batch are
``fast_path.py``'s (:class:`SGLangDecodeFastPath`, which :class:`SGLangEngine` extends).
"""

from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np

from servesim.engines.base import EngineLimits, EngineSnapshot
from servesim.engines.host import host_link
from servesim.engines.sglang.batch import NO_LIMIT, new_running_batch
from servesim.engines.sglang.fast_path import (SGLangDecodeFastPath, SGReq, _DecodeBatch, _GhostBatch,
                                               _PrefillBatch)
from servesim.engines.sglang.options import SGLangOptions
from servesim.engines.sglang.overlap import OverlapLag
from servesim.engines.sglang.recv_interval import RecvSkipper
from servesim.errors import ConfigError
from servesim.kvcache.host_tier import HostRadix
from servesim.kvcache.radix_cache import RadixCache
from servesim.metrics.recorder import RequestRecorder
from servesim.perf.plan import PassPlan
from servesim.workload.request import Request, sequence_units

CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
INIT_NEW_TOKEN_RATIO = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
RETRACT_DECODE_STEPS = 20
LPM_FALLBACK_QUEUE_LEN = 128


class SGLangEngine(SGLangDecodeFastPath):
    """One SGLang worker (one tensor-parallel group): the reference scheduling.

    The running batch's decode passes, their stretches and the KV bookkeeping of a request
    leaving the batch are :class:`~servesim.engines.sglang.fast_path.SGLangDecodeFastPath`'s;
    this class holds the state they read (set here) and provides :meth:`_retract`.
    """

    name = "sglang"
    supports_speculative = True

    def __init__(self, worker_id: int, recorder: RequestRecorder, limits: EngineLimits,
                 options: SGLangOptions, chunked_prefill_size: int | None,
                 oracle=None) -> None:
        super().__init__(worker_id, recorder, limits)
        self.opt = options
        self.page = options.page_size
        cap = (limits.kv_capacity_tokens // self.page) * self.page
        self.capacity = cap
        self.tree = RadixCache(cap, page_size=self.page, disable=options.disable_radix_cache,
                               policy=options.eviction_policy, oracle=oracle)
        self.pool = self.tree.pool
        #: Host tier (HiCache): evicted radix paths go to a host radix tree; None when off.
        self.hostlink = host_link("sglang", options.host_kv_gb, options.host_link_gbs,
                                  options.host_load_overlap, limits, granule=self.page)
        self.host: HostRadix | None = None
        if self.hostlink is not None:
            if options.disable_radix_cache:
                raise ConfigError("deployment.engine.host_kv_gb: a host KV tier needs the radix cache; "
                                  "disable_radix_cache is true")
            self.host = HostRadix(self.hostlink.capacity_tokens, self.page, on_event=self._host_event)
            self.tree.on_evict = self._write_to_host
        self.host_loaded_tokens = 0
        self.chunk_size = chunked_prefill_size  # None: chunking disabled
        ctx = options.context_length or limits.context_length
        self.max_req_len = min(ctx - 1, cap - 1)
        self.max_req_input_len = self.max_req_len - 5
        if options.max_running_requests is not None:
            self.max_running = options.max_running_requests
        else:
            pool = min(max(int(cap / ctx * 512), 2048), 4096)
            self.max_running = max(1, min(cap // 2, pool))
        self.init_ratio = min(INIT_NEW_TOKEN_RATIO * options.schedule_conservativeness, 1.0)
        self.min_ratio = min(self.init_ratio * MIN_NEW_TOKEN_RATIO_FACTOR, self.init_ratio)
        self.ratio_decay = (self.init_ratio - self.min_ratio) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.new_token_ratio = self.init_ratio
        self.waiting: list[SGReq] = []
        #: The running batch, in admission order.  While a request runs, its progress lives
        #: in ``batch``'s columns (position ``i`` is ``running[i]``), not in its ``SGReq``, so
        #: a decode pass touches no Python object per request; the object's
        #: ``computed``/``generated``/``alloc`` are written back when it leaves the batch.
        #: Between passes a running request holds ``alloc == ceil_page(computed) - prefix``
        #: private tokens (``ceil_page(computed + 1) - prefix`` while a decode pass is in flight).
        self.batch = new_running_batch()
        self.running: list[SGReq] = self.batch.reqs  # changed in place only
        #: min(max_new - generated) over the running batch (a large number when it is empty).
        self._left_min = NO_LIMIT
        self._decode_in_flight = False
        self.chunked: SGReq | None = None
        self.batch_is_full = False
        self.retractions = 0
        #: Requests of the prefill pass in flight (not yet running, not waiting).
        self.prefilling: list[SGReq] = []
        #: Disaggregated decode: requests whose prompt KV arrived, awaiting admission.
        self.ready: list[SGReq] = []
        #: When each request of ``ready`` arrived; the overlap loop admits those that arrived by
        #: ``_cutoff`` (the arrival time its current choice of pass sees: engines/sglang/overlap.py).
        self.ready_at: list[float] = []
        self._cutoff = 0.0
        #: ``scheduler_recv_interval`` > 1: arrived requests the scheduler has not pulled yet.
        self.recv = RecvSkipper(options.scheduler_recv_interval) if options.scheduler_recv_interval > 1 else None
        self.inbox: list[SGReq] = []
        #: When each request of ``inbox`` reached the scheduler's socket.
        self.inbox_at: list[float] = []
        #: The overlap event loop's view (None: SGLang's normal loop, ``disable_overlap_schedule``).
        self.lag = None if options.disable_overlap_schedule else OverlapLag()
        #: The kind of pass the last schedule() returned (True decode, False prefill, None none).
        self._last_decoded: bool | None = None

    # -- host tier ----------------------------------------------------------------------
    def _write_to_host(self, segs: list) -> None:
        """The GPU tree evicts a leaf: its path is written back to host memory."""
        self.host.store(segs, self.tree.now)

    def _host_event(self, event) -> None:
        """Host-tier events go wherever the GPU tree's events go (tier "host")."""
        sink = self.tree.on_event
        if sink is not None:
            sink(event)

    def _host_match(self, sr: SGReq, matched: int) -> int:
        """Tokens beyond the GPU match ``matched`` that the host holds (page aligned)."""
        on_host = self.host.match(sequence_units(sr.req, sr.fill - 1), None, self.tree.now)
        return max(on_host - matched, 0)

    # -- arrivals -------------------------------------------------------------------------
    def add_request(self, req: Request, now: float, kv_ready: int = 0) -> None:
        if req.input_length >= self.max_req_input_len:
            # One reason per cause (not per length), so the summary can count them.
            self._reject(req, now, f"prompt exceeds the maximum input length ({self.max_req_input_len} tokens)")
            return
        max_new = min(req.output_length, self.max_req_len - req.input_length - 1)
        sr = SGReq(req=req, max_new=max(1, max_new), fill=req.input_length)
        if kv_ready:  # disaggregated decode: admitted by _admit_ready, no prefill pass
            self.ready.append(sr)
            self.ready_at.append(now)
            return
        if self.recv is None and self.lag is None:
            self.waiting.append(sr)
            return
        self.inbox.append(sr)
        self.inbox_at.append(now)

    def _poll(self, now: float) -> None:
        """The scheduler iteration's pull of arrived requests: every iteration, or every
        ``scheduler_recv_interval`` decode passes; with the overlap loop, of those that arrived
        before the pass now ending started."""
        if self.recv is not None and not self.recv.tick(self._last_decoded):
            return
        self._take_inbox(self._cutoff)

    def _pull_all(self, now: float) -> None:
        """A pull that sees every arrival so far (the loop spun through an empty iteration)."""
        if self.recv is not None:
            self.recv.pull_now()
        self._take_inbox(now)

    def _take_inbox(self, cutoff: float) -> None:
        """Requests that reached the socket by ``cutoff`` join the waiting queue."""
        at = self.inbox_at
        n = len(at)
        if not n:
            return
        if at[n - 1] > cutoff:
            n = bisect_right(at, cutoff)
            if not n:
                return
            self.waiting.extend(self.inbox[:n])
            del self.inbox[:n]
            del at[:n]
            return
        self.waiting.extend(self.inbox)
        self.inbox.clear()
        at.clear()

    def _admit_ready(self, now: float) -> None:
        """Disaggregated decode: requests whose prompt KV arrived join the running batch.

        In arrival order, while the batch has a seat and PrefillAdder's budget (free plus
        evictable KV, minus the running requests' reserve) covers the prompt's KV beyond
        the prefix this worker holds plus the remaining output; the first that does not
        fit waits.  No pass runs: the first token (sampled by the prefill worker) is
        emitted at admission.
        """
        reserve = self.batch.reserve(CLIP_MAX_NEW_TOKENS) * self.new_token_ratio
        taken: list[SGReq] = []
        for i, sr in enumerate(self.ready):
            if len(self.running) + len(taken) >= self.max_running or self.ready_at[i] > self._cutoff:
                break
            matched, node = self._match(sr)
            matched = min(self._floor_page(matched), sr.fill - 1)
            total = self._ceil_page(sr.fill) - matched + min(sr.remaining_new - 1, CLIP_MAX_NEW_TOKENS)
            if total >= self.pool.free_tokens + self.tree.evictable_size - reserve:
                break
            self.tree.inc_lock_ref(node)
            if total >= self.pool.free_tokens + self.tree.evictable_size - reserve:
                self.tree.dec_lock_ref(node)
                break
            self._take_prefix(sr, matched, node)
            if not self._grow(sr, sr.fill):
                raise AssertionError("SGLang model: transferred KV admitted without room")
            sr.computed = sr.fill
            sr.generated = 1
            reserve += total
            self._cache_unfinished(sr)
            taken.append(sr)
        if not taken:
            return
        del self.ready[:len(taken)]
        del self.ready_at[:len(taken)]
        self.rec.emit(np.fromiter((sr.req.index for sr in taken), dtype=np.int64, count=len(taken)), now)
        for sr in taken:
            if sr.generated >= sr.max_new:
                self._release(sr, insert=True)
                self._end(sr, now)
            else:
                self._run_append(sr)

    def _has_pulled_work(self) -> bool:
        """Work the scheduler already holds (not counting requests still in its socket)."""
        return bool(self.waiting or self.running or self.chunked is not None or self.ready)

    def has_work(self) -> bool:
        return self._has_pulled_work() or bool(self.inbox) or (self.lag is not None and self.lag.ghost_ctx is not None)

    # -- the engine interface's KV and queue questions (engines/base.py) ----------------------
    def kv_cache(self):
        return self.tree

    def held_prefix_tokens(self, req: Request) -> int:
        n = req.input_length - 1
        return int(self.tree.match_prefix(sequence_units(req, n)).tokens) if n > 0 else 0

    def transfers_waiting(self) -> int:
        return len(self.ready)

    def queue_counts(self) -> tuple[int, int]:
        """Waiting (with transferred requests and the chunked one) and running requests."""
        waiting = len(self.waiting) + len(self.ready) + (1 if self.chunked is not None else 0)
        return waiting, len(self.running)

    # -- scheduling -----------------------------------------------------------------------
    def schedule(self, now: float) -> PassPlan | None:
        self.tree.now = now
        lag = self.lag
        self._cutoff = now if lag is None else lag.cutoff(now)
        if self.recv is not None or self.inbox:
            self._poll(now)
        if self.inbox and not self._has_pulled_work() and (lag is None or lag.spins()):
            self._cutoff = now
            self._pull_all(now)  # an idle scheduler spins to its next pull in microseconds
        plan = self._next_pass(now)
        if plan is None and lag is not None:
            if lag.ghost_ctx is not None:  # the finished batch decodes once more
                self._last_decoded = True
                plan = PassPlan(decode_ctx=lag.ghost_ctx, requests=_GhostBatch(lag.ghost_ctx.size))
            elif (self.inbox or self.ready) and lag.spins():  # an empty iteration, then a pull that sees all
                self._cutoff = now
                self._pull_all(now)
                plan = self._next_pass(now)
        if plan is None:
            self._last_decoded = None
            self.new_token_ratio = self.init_ratio  # idle: SGLang resets the estimate
        if lag is not None:
            lag.decided(now, plan is not None)
        return plan

    def _next_pass(self, now: float) -> PassPlan | None:
        """Prefill if anything can be admitted (prefill first), else decode the running batch."""
        if self.ready:
            self._admit_ready(now)
        if self.chunked is not None:
            self._cache_unfinished(self.chunked)
        batch = self._new_prefill_batch()
        if batch is not None:
            self._last_decoded = False
            return self._prefill_plan(batch, now)
        if self.running:
            self._last_decoded = True
            return self._decode_plan()
        return None

    def _sorted_queue(self) -> None:
        if (self.opt.schedule_policy != "lpm" or self.opt.disable_radix_cache
                or len(self.waiting) > LPM_FALLBACK_QUEUE_LEN):
            return
        keyed = []
        for sr in self.waiting:
            matched, _node = self._match(sr)
            keyed.append((-matched, sr))
        keyed.sort(key=lambda kv: kv[0])  # stable: ties keep queue order
        self.waiting = [sr for _, sr in keyed]

    def _match(self, sr: SGReq) -> tuple[int, object]:
        """Cached tokens for the request's next round (at least one token is recomputed)."""
        # The walk reads the request's block ids as it goes: a try costs the nodes it compares,
        # not a segment per page of the prompt (RadixCache.match_request).
        res = self.tree.match_request(sr.req, self._floor_page(sr.fill - 1))
        return res.tokens, res.node

    def _new_prefill_batch(self) -> _PrefillBatch | None:
        if (self.batch_is_full or not self.waiting) and self.chunked is None:
            return None
        allocatable = self.max_running - len(self.running)
        if allocatable <= 0 and self.chunked is None:
            self.batch_is_full = True
            return None
        self._sorted_queue()
        total_offset = self.batch.reserve(CLIP_MAX_NEW_TOKENS) * self.new_token_ratio
        cur_offset = 0
        rem_input = self.opt.max_prefill_tokens
        rem_chunk = self.chunk_size if self.chunk_size is not None else math.inf
        can_run: list[SGReq] = []
        new_chunked: SGReq | None = None

        if self.chunked is not None:
            sr = self.chunked
            left = sr.fill - sr.computed
            take = int(min(rem_chunk, self._budget(total_offset), left))
            if take <= 0:
                return None
            sr.extend = take
            if take >= left:
                total_offset += left + min(sr.remaining_new, CLIP_MAX_NEW_TOKENS)
            else:
                total_offset += take
                new_chunked = sr
            cur_offset += sr.extend
            rem_input -= sr.extend
            rem_chunk -= sr.extend
            can_run.append(sr)

        stop = self._budget(total_offset) <= 0 or self._budget(cur_offset) <= 0 or rem_input <= 0 or rem_chunk <= 0
        consumed = 0
        if not stop:
            for sr in self.waiting:
                if len(can_run) >= allocatable:
                    self.batch_is_full = True
                    break
                matched, node = self._match(sr)
                matched = min(self._floor_page(matched), sr.fill - 1)
                extend = sr.fill - matched
                # Host hits need KV room (counted in ``extend``) but no compute.
                hh = self._host_match(sr, matched) if self.host is not None else 0
                total_tokens = extend + min(sr.remaining_new, CLIP_MAX_NEW_TOKENS)
                if total_tokens >= self._budget(total_offset):
                    self.batch_is_full = True
                    break
                input_tokens = self._ceil_page(extend - hh)
                if input_tokens >= rem_input and can_run:
                    break
                # Locking the matched prefix takes it out of the evictable pool.
                self.tree.inc_lock_ref(node)
                if total_tokens >= self._budget(total_offset):
                    self.tree.dec_lock_ref(node)
                    self.batch_is_full = True
                    break
                if self.chunk_size is None or input_tokens <= rem_chunk:
                    sr.extend = extend - hh
                    total_offset += input_tokens + hh + min(sr.remaining_new, CLIP_MAX_NEW_TOKENS)
                    cur_offset += input_tokens + hh
                    rem_input -= input_tokens
                    rem_chunk -= input_tokens
                else:
                    trunc = self._floor_page(int(rem_chunk))
                    if trunc <= 0:
                        self.tree.dec_lock_ref(node)
                        break
                    sr.extend = trunc
                    total_offset += trunc + hh
                    cur_offset += trunc + hh
                    rem_input -= trunc
                    rem_chunk -= trunc
                    new_chunked = sr
                self._take_prefix(sr, matched, node, hh)
                can_run.append(sr)
                consumed += 1
                if self._budget(total_offset) <= 0 or self._budget(cur_offset) <= 0:
                    self.batch_is_full = True
                    break
                if rem_input <= 0 or rem_chunk <= 0 or new_chunked is sr:
                    break
        if consumed:
            del self.waiting[:consumed]
        if not can_run:
            return None
        self.chunked = new_chunked
        return _PrefillBatch(reqs=can_run, chunked=new_chunked)

    def _budget(self, reserved: float) -> float:
        """Free plus evictable KV beyond ``reserved``: PrefillAdder's ``rem_total_tokens`` with the
        pass's total offset, its ``cur_rem_tokens`` with the current one."""
        return self.pool.free_tokens + self.tree.evictable_size - reserved

    def _take_prefix(self, sr: SGReq, matched: int, node: object, host_hit: int = 0) -> None:
        """The request starts this round from a cached prefix it has locked.

        ``host_hit`` tokens after it are loaded from the host tier: they count as computed
        (their KV is allocated privately with the pass's chunk) and need no compute.
        """
        sr.prefix = matched
        sr.node = node
        sr.computed = matched + host_hit
        sr.host_hit = host_hit
        sr.alloc = 0
        if not sr.admitted_once:
            sr.admitted_once = True
            self.prompt_tokens += sr.req.input_length
            self.cached_prompt_tokens += matched + host_hit

    def _prefill_plan(self, batch: _PrefillBatch, now: float) -> PassPlan:
        new = np.empty(len(batch.reqs), dtype=np.int64)
        cached = np.empty(len(batch.reqs), dtype=np.int64)
        loaded = 0
        for i, sr in enumerate(batch.reqs):
            ok = self._grow(sr, sr.computed + sr.extend)
            if not ok:  # the budget check guarantees room; a failure is a model bug
                raise AssertionError("SGLang model: prefill admitted without KV room")
            new[i] = sr.extend
            cached[i] = sr.computed
            self.rec.scheduled(sr.req.index, now, sr.prefix + sr.host_hit, sr.host_hit)
            loaded += sr.host_hit
            sr.host_hit = 0
        self.prefilling = batch.reqs
        plan = PassPlan(prefill_new=new, prefill_cached=cached, requests=batch)
        if loaded:
            self.host_loaded_tokens += loaded
            plan.host_load_s = self.hostlink.load_seconds(loaded)
            plan.host_load_overlap = self.hostlink.overlap
        return plan

    def _decode_need(self, reqs: list[SGReq]) -> int:
        if self.spec is not None:
            return self._spec_need(np.fromiter((sr.computed for sr in reqs), dtype=np.int64, count=len(reqs)))
        if self.page == 1:
            return len(reqs)
        p = self.page
        return sum(p for sr in reqs if sr.computed % p == 0)

    def _retract(self, need: int) -> None:
        """Free KV by retracting the requests with the least progress (SGLang retract_decode)."""
        self.batch.sync(self.page)
        order = sorted(self.running, key=lambda sr: (sr.generated, -sr.req.input_length), reverse=True)
        retracted: list[SGReq] = []
        while True:
            victim = order.pop()
            retracted.append(victim)
            self._release(victim, insert=False)
            victim.prefix = victim.computed = 0
            victim.fill = victim.req.input_length + victim.generated
            self.rec.retracted(victim.req.index)
            self.retractions += 1
            need = self._decode_need(order)
            self._evict_to(need)
            if self.pool.free_tokens >= need or len(order) <= 1:
                break
        keep = set(id(sr) for sr in order)
        self._run_rebuild([sr for sr in self.running if id(sr) in keep])
        self.waiting.extend(retracted)
        self.batch_is_full = False
        self._evict_to(len(self.running) * RETRACT_DECODE_STEPS)
        gen = sum(sr.generated for sr in self.running)
        max_new = sum(sr.max_new for sr in self.running)
        self.new_token_ratio = min(1.0, (gen + RETRACT_DECODE_STEPS * len(self.running)) / (max_new + 1))

    # -- commit -----------------------------------------------------------------------------
    def complete(self, plan: PassPlan, end: float) -> None:
        self.tree.now = end
        if self.lag is not None:
            self.lag.ended(end)
        batch = plan.requests
        if isinstance(batch, _PrefillBatch):
            self._complete_prefill(batch, end)
        elif isinstance(batch, _DecodeBatch):
            self._complete_decode(batch.n, end)
        # else a ghost pass (_GhostBatch): its tokens are discarded

    def _complete_prefill(self, batch: _PrefillBatch, end: float) -> None:
        self.prefilling = []
        emitted: list[SGReq] = []
        for sr in batch.reqs:
            sr.computed += sr.extend
            sr.extend = 0
            if sr is batch.chunked:
                continue
            sr.generated += 1
            emitted.append(sr)
        if emitted:
            self.rec.emit(np.array([sr.req.index for sr in emitted], dtype=np.int64), end)
        for sr in emitted:
            if sr.generated >= sr.max_new:
                self._release(sr, insert=True)
                self._end(sr, end)
                self.batch_is_full = False  # room was freed, as when a decode finishes
            else:
                self._cache_unfinished(sr)
                self._run_append(sr)

    # -- abort ---------------------------------------------------------------------------------
    def abort(self, index: int, now: float, reason: str = "cancelled by the client") -> bool:
        """SGLang's ``abort_request``, handled between passes.

        A request not yet admitted (the waiting queue, the socket's inbox, the transferred-KV
        queue) is taken out as it is.  A request holding KV (in the running batch, or the one
        whose prompt is being chunked) is released as a finished one is: its page-aligned
        computed tokens go into the radix tree, its lock is dropped (the cached prefix becomes
        evictable) and its other private KV is freed.  (SGLang flags a running request and
        ends it when the result of the next batch holding it is processed; the model ends it
        at the pass boundary where the abort is handled, with no further pass for it.)
        """
        self.tree.now = now
        for queue, times in ((self.waiting, None), (self.inbox, self.inbox_at), (self.ready, self.ready_at)):
            for i, sr in enumerate(queue):
                if sr.req.index == index and sr is not self.chunked:
                    del queue[i]
                    if times is not None:
                        del times[i]
                    self.batch_is_full = False
                    self._cancel(sr.req, now, reason)
                    return True
        sr = self.chunked
        if sr is not None and sr.req.index == index:
            self.chunked = None
            if sr in self.waiting:
                self.waiting.remove(sr)
            self._release(sr, insert=True)
            self.batch_is_full = False
            self._cancel(sr.req, now, reason)
            return True
        for sr in self.running:
            if sr.req.index == index:
                self.batch.sync(self.page)  # the columns hold the running requests' progress
                self._run_rebuild([other for other in self.running if other is not sr])
                self._release(sr, insert=True)
                self.batch_is_full = False
                self._cancel(sr.req, now, reason)
                return True
        return False

    # -- state ---------------------------------------------------------------------------------
    def snapshot(self) -> EngineSnapshot:
        waiting = len(self.waiting) + len(self.inbox) + (1 if self.chunked is not None else 0)
        outstanding = self._queued_outstanding() + self.batch.outstanding()
        return EngineSnapshot(
            running=len(self.running),
            waiting=waiting,
            kv_used_tokens=self.capacity - self.free - self.evictable,
            kv_capacity_tokens=self.capacity,
            prompt_tokens=self.prompt_tokens,
            cached_prompt_tokens=self.cached_prompt_tokens,
            outstanding_tokens=outstanding,
        )

    def _queued_outstanding(self) -> int:
        """Tokens the waiting and not yet polled requests have left to compute and to generate.

        A loop over typed requests: the time series takes a snapshot every second of every
        worker, and on agent loads hundreds of requests wait (a generator over a joined list,
        each reading a property, was a tenth of an SGLang run's sampling)."""
        total = 0
        for sr in self.waiting:
            total += sr.fill - sr.computed + max(sr.max_new - sr.generated, 0)
        for sr in self.inbox:
            total += sr.fill - sr.computed + max(sr.max_new - sr.generated, 0)
        return total

    def check_invariants(self) -> None:
        """KV conservation: the private tokens the pool counts are exactly what requests hold."""
        n = self.batch.n
        comp, gen, max_new, prefix = self.batch.columns()
        idx = self.batch.indices()
        assert len(self.running) == n
        assert all(int(idx[i]) == sr.req.index and int(prefix[i]) == sr.prefix for i, sr in enumerate(self.running))
        assert bool((gen < max_new).all())
        if n:
            assert self._left_min == int((max_new - gen).min())
        p = self.page
        held = comp + int(self._decode_in_flight)  # k + 1 while a speculative pass runs
        run_alloc = -(-held // p) * p - prefix
        assert bool((run_alloc >= 0).all())
        others = [sr for sr in self.prefilling if sr not in self.running]
        if self.chunked is not None and self.chunked not in others and self.chunked not in self.running:
            others.append(self.chunked)
        assert all(sr.alloc >= 0 for sr in others)
        assert not any(sr.alloc or sr.node is not None for sr in self.waiting if sr is not self.chunked)
        assert not any(sr.alloc or sr.node is not None for sr in self.inbox)
        private = int(run_alloc.sum()) + sum(sr.alloc for sr in others)
        assert self.pool.private_tokens == private, (self.pool.private_tokens, private)
        assert self.pool.capacity == self.capacity
        self.tree.check_invariants()
        if self.host is not None:
            self.host.check_invariants()
            assert self.host.size <= self.hostlink.capacity_tokens
