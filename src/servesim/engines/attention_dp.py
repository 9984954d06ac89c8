"""Attention data parallelism: several attention ranks in one worker, run in lock-step.

DeepSeek-style deployments (SGLang ``--enable-dp-attention``, vLLM ``data_parallel_size``
with an MoE model, TensorRT-LLM ``enable_attention_dp``) give each of ``dp`` attention
ranks its own scheduler and KV cache while the MoE / MLP layers span every GPU of the
worker.  Every forward pass is collective: each rank runs its own sub-batch through the
attention layers, then all ranks exchange tokens for the experts.  A rank with nothing to
do still joins the pass (SGLang runs an idle batch so the collectives line up), so the
pass lasts as long as its slowest rank plus the shared expert layers.

:class:`AttentionDPEngine` holds one ordinary engine per rank (each with its own KV pool
and per-rank budgets) and:

* places each arriving request on one rank by the real engine's rule (:data:`PLACEMENT`);
* asks every rank for its sub-pass at the same instant and returns their union as one
  :class:`~servesim.perf.plan.PassPlan` whose ``ranks`` field keeps the per-rank
  compositions (the analytic step-time model prices the slowest rank's attention plus
  the shared layers over all tokens; other models price the union);
* commits the pass on every rank that ran;
* fast-forwards a decode stretch only as far as every rank can (the minimum of the ranks'
  own limits; an idle rank with queued work disables it, an idle rank without work does
  not limit it).

Placement rules (sources read for this model; docs/config.md cites them too):

* SGLang ``round_robin`` (the default ``load_balance_method``) — rank ``i mod dp`` for the
  ``i``-th request (``managers/data_parallel_controller.py``, SGLang main, 2025-26).
  ``shortest_queue`` is modelled as "fewest requests (waiting + running), lowest rank on
  ties", with exact counts where SGLang uses periodic load reports.
* vLLM — the rank with the lowest ``4 × waiting + running``, scanning from rank 0, first
  minimum wins (``DPLBAsyncMPClient.get_core_engine_for_request`` in
  ``vllm/v1/engine/core_client.py``, v0.10-v0.11); the real client reads counts the DP
  coordinator publishes every 100 ms, this model reads them exactly.
* TensorRT-LLM — among ranks with fewer active requests than
  ``max(ceil((active + 1) / dp), max active)``, the one with the fewest active prompt
  tokens, then fewest active requests, then lowest rank (attention-DP request balancing of
  the PyTorch executor, ``ADPRouter`` / ``_balance_requests_across_ranks``, main 2025-26).

All three read only request counts and prompt lengths, which a decode stretch does not
change, so fast-forward stays exact.

TensorRT-LLM's ADP balance (``attention_dp_config.enable_balance``; :class:`ADPBalance`):
after every rank's scheduler has chosen its iteration, the ranks exchange how many context
and generation requests they chose, and the context requests of *all* ranks are held back
(the generation requests still run) unless every rank has a context to run; a timeout
(``timeout_iters``) and ranks without generation work end the wait, and once every rank has
one the contexts may wait ``batching_wait_iters`` more iterations to gather (PyExecutor
``_balance_adp_requests`` in ``tensorrt_llm/_torch/pyexecutor/py_executor.py``, 1.1-1.2;
docs/source/blogs/tech_blog/blog10_ADP_Balance_Strategy.md).  Modelled with the
GUARANTEED_NO_EVICT capacity policy.  TensorRT-LLM's batch waiting (``batch_wait_*``) is
skipped by the executor with attention DP, so the ranks here run without it.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from servesim.engines.base import Engine, EngineLimits, EngineSnapshot
from servesim.errors import ConfigError
from servesim.metrics.recorder import RequestRecorder
from servesim.perf.plan import PassPlan, rank_union
from servesim.workload.request import Request

#: Extra recorder column: the attention-DP rank each request was placed on (-1: none).
RANK_COLUMN = "dp_rank"


# -- per-rank load counts ------------------------------------------------------------------
def queue_counts(engine: Engine) -> tuple[int, int]:
    """(waiting, running) requests of one rank, as the engines' load reports count them."""
    return engine.queue_counts()


def active_prompt_tokens(engine: Engine) -> tuple[int, int]:
    """(prompt tokens, requests) a TensorRT-LLM rank holds: its active and arrived requests."""
    reqs = list(engine.active) + list(engine.ready)
    return sum(tr.req.input_length for tr in reqs), len(reqs)


# -- placement rules -------------------------------------------------------------------------
class Placement:
    """Chooses the rank of an arriving request; :meth:`peek` answers without committing."""

    def peek(self, ranks: Sequence[Engine], req: Request) -> int:
        raise NotImplementedError

    def choose(self, ranks: Sequence[Engine], req: Request) -> int:
        return self.peek(ranks, req)


class RoundRobin(Placement):
    """SGLang's default: the ``i``-th request goes to rank ``i mod dp``."""

    def __init__(self) -> None:
        self.next = 0

    def peek(self, ranks: Sequence[Engine], req: Request) -> int:
        return self.next % len(ranks)

    def choose(self, ranks: Sequence[Engine], req: Request) -> int:
        r = self.peek(ranks, req)
        self.next = r + 1
        return r


class ShortestQueue(Placement):
    """SGLang ``shortest_queue``: fewest requests (waiting + running); lowest rank on ties."""

    def peek(self, ranks: Sequence[Engine], req: Request) -> int:
        loads = [sum(queue_counts(e)) for e in ranks]
        return loads.index(min(loads))


class VLLMScore(Placement):
    """vLLM's DP load balancer: lowest ``4 × waiting + running``, first minimum from rank 0."""

    def peek(self, ranks: Sequence[Engine], req: Request) -> int:
        best, best_score = 0, math.inf
        for i, e in enumerate(ranks):
            waiting, running = queue_counts(e)
            score = 4 * waiting + running
            if score < best_score:
                best, best_score = i, score
        return best


class TRTLLMBalance(Placement):
    """TensorRT-LLM attention DP: ranks under the expected share, fewest active prompt tokens."""

    def peek(self, ranks: Sequence[Engine], req: Request) -> int:
        loads = [active_prompt_tokens(e) for e in ranks]
        counts = [n for _, n in loads]
        expected = max(-(-(sum(counts) + 1) // len(ranks)), max(counts))
        eligible = [(tok, n, i) for i, (tok, n) in enumerate(loads) if n < expected]
        return min(eligible)[2]


#: Placement rules by name; :data:`DEFAULT_PLACEMENT` picks one per engine.
PLACEMENT: dict[str, Callable[[], Placement]] = {
    "round_robin": RoundRobin,
    "shortest_queue": ShortestQueue,
    "vllm": VLLMScore,
    "trtllm": TRTLLMBalance,
}
DEFAULT_PLACEMENT = {"sglang": "round_robin", "vllm": "vllm", "trtllm": "trtllm"}


# -- TensorRT-LLM ADP balance ------------------------------------------------------------------------
class ADPBalance:
    """TensorRT-LLM's attention-DP context balancing: one decision per iteration for all ranks.

    Every rank sees the same gathered counts, so all ranks take the same decision and keep
    the same two counters.  :meth:`step` takes three facts about the iteration the ranks'
    schedulers chose — every rank has fewer generation requests than ``max_batch_size``,
    every rank has a context request, every rank has a generation request (an idle rank
    counts as having one: TensorRT-LLM pads it with a dummy generation request) — and says
    whether the context requests run:

    * every rank has room and a context: the wait counter restarts; the contexts run at
      once if some rank has no generation work, otherwise after ``batching_wait_iters``
      held iterations (counted by the batching counter, which restarts when they run);
    * otherwise the contexts are held and the wait counter advances; they run (and the
      counter restarts) when it reaches ``timeout_iters`` or when some rank has no
      generation work.  The counter advances in every such iteration, with or without a
      context anywhere, so it works as a clock that releases held contexts every
      ``timeout_iters`` iterations.
    """

    def __init__(self, timeout_iters: int, batching_wait_iters: int) -> None:
        self.timeout = timeout_iters
        self.batching = batching_wait_iters
        self.waited = 0
        self.batched = 0

    def step(self, all_room: bool, all_ctx: bool, all_gen: bool) -> bool:
        """Advance one iteration; True if the context requests run in it."""
        if all_room and all_ctx:
            self.waited = 0
            if not all_gen:
                return True
            if self.batched < self.batching:
                self.batched += 1
                return False
            self.batched = 0
            return True
        self.waited += 1
        if self.waited >= self.timeout or not all_gen:
            self.waited = 0
            return True
        return False

    def held_passes(self, all_room: bool, all_ctx: bool) -> int:
        """Iterations in a row, the one just decided included, that keep holding contexts.

        Valid right after :meth:`step` returned False, the facts staying the same.
        """
        if all_room and all_ctx:  # gathering: held while the batching counter is short
            return self.batching - self.batched + 1
        return self.timeout - self.waited  # waiting: held until the counter reaches the timeout


def trtllm_iteration_counts(engine) -> tuple[int, int]:
    """(context, generation) requests a TensorRT-LLM rank's schedulers put in its next iteration.

    The same walk as ``TRTLLMEngine.schedule`` (capacity scheduler, then the micro-batch
    scheduler's token budget and batch size, chunks cut from what generation leaves) without
    taking any block: under GUARANTEED_NO_EVICT the capacity scheduler only reads the pool.
    Like ``schedule`` it notes each unstarted context's prefix hit on the request.
    """
    fitting, _ = engine._capacity()
    budget = engine.max_tokens
    step_tokens = 1 + engine._drafts()
    tokens = n_ctx = n_gen = count = 0
    chunk_rems: list[int] = []
    for tr in fitting:
        if tr.context:
            if tr.blocks:
                start = tr.computed
            else:
                tr.hit = engine._lookup(tr)
                tr.host_hit = engine._host_lookup(tr)
                start = (tr.hit + tr.host_hit) * engine.bs
            rem = tr.ctx_len - start
            if engine.chunking:
                chunk_rems.append(rem)
            else:
                if tokens + rem > budget and tokens > 0:
                    break
                tokens += rem
                n_ctx += 1
        else:
            if tokens + step_tokens > budget:
                break
            tokens += step_tokens
            n_gen += 1
        count += 1
        if count >= engine.max_batch:
            break
    cap = budget - tokens
    for rem in chunk_rems:
        chunk = min(rem, cap)
        if chunk < rem:
            chunk = (chunk // engine.bs) * engine.bs
        if chunk <= 0:
            continue
        cap -= chunk
        n_ctx += 1
    return n_ctx, n_gen


def schedule_generation_only(engine, now: float) -> PassPlan | None:
    """A TensorRT-LLM rank's iteration with its context requests held back.

    Under GUARANTEED_NO_EVICT the capacity scheduler lists the generating requests before
    any context, so hiding the contexts leaves exactly the generation steps the full
    iteration would run.  The contexts keep their place in the active list.
    """
    saved = engine.active
    engine.active = [tr for tr in saved if not tr.context]
    try:
        return engine.schedule(now)
    finally:
        after = engine.active
        still = {id(tr) for tr in after}
        known = {id(tr) for tr in saved}
        engine.active = ([tr for tr in saved if tr.context or id(tr) in still]
                         + [tr for tr in after if id(tr) not in known])


# -- the engine ---------------------------------------------------------------------------------
class AttentionDPEngine(Engine):
    """``dp`` engines (one per attention rank) run in lock-step as one worker."""

    def __init__(self, worker_id: int, recorder: RequestRecorder, limits: EngineLimits,
                 ranks: Sequence[Engine], placement: str | None = None) -> None:
        # Not Engine.__init__: terminated and the prompt counters aggregate the ranks.
        if len(ranks) < 2:
            raise ValueError("attention DP needs at least two ranks")
        self.worker_id = worker_id
        self.rec = recorder
        self.limits = limits
        self.ranks = list(ranks)
        self.name = self.ranks[0].name
        self.supports_speculative = self.ranks[0].supports_speculative
        rule = placement or DEFAULT_PLACEMENT.get(self.name, "round_robin")
        if rule not in PLACEMENT:
            raise ValueError(f"unknown attention-DP placement {rule!r}; expected one of {sorted(PLACEMENT)}")
        self.placement = PLACEMENT[rule]()
        self._terminated: list[Request] = []
        self._plans: tuple[PassPlan | None, ...] = ()
        #: TensorRT-LLM ADP balance (None: off); the facts of the last iteration decided and
        #: whether it held any context back.
        self.balance: ADPBalance | None = None
        self._facts: tuple[bool, bool, bool] = (True, False, True)
        self._held = False
        opt = getattr(self.ranks[0], "opt", None)
        if self.name == "trtllm":
            # TensorRT-LLM applies batch waiting only without attention DP (PyExecutor _schedule)
            for e in self.ranks:
                e.batch_wait = False
        if self.name == "trtllm" and getattr(opt, "attention_dp_enable_balance", False):
            if opt.capacity_scheduler_policy != "GUARANTEED_NO_EVICT":
                raise ConfigError("deployment.engine.attention_dp_enable_balance: the ADP balance is modelled "
                                  "with capacity_scheduler_policy GUARANTEED_NO_EVICT only "
                                  f"(found {opt.capacity_scheduler_policy})")
            self.balance = ADPBalance(opt.attention_dp_timeout_iters, opt.attention_dp_batching_wait_iters)
        recorder.extra(RANK_COLUMN, np.int64, -1)

    # -- aggregated state ------------------------------------------------------------------
    @property
    def terminated(self) -> list[Request]:
        """Requests that ended on any rank since the loop last drained them (rank order)."""
        for e in self.ranks:
            if e.terminated:
                self._terminated.extend(e.terminated)
                e.terminated = []
        return self._terminated

    @terminated.setter
    def terminated(self, value: list[Request]) -> None:
        self._terminated = value

    @property
    def prompt_tokens(self) -> int:
        return sum(e.prompt_tokens for e in self.ranks)

    @property
    def cached_prompt_tokens(self) -> int:
        return sum(e.cached_prompt_tokens for e in self.ranks)

    @property
    def spec(self):
        return self.ranks[0].spec

    @spec.setter
    def spec(self, decoder) -> None:
        # One draft sampler for all ranks: ranks draw in rank order, so runs stay reproducible.
        for e in self.ranks:
            e.spec = decoder

    # -- the engine interface's KV and queue questions (engines/base.py) ----------------------
    def kv_cache(self):
        raise NotImplementedError("an attention-DP engine has one KV cache per rank: see engine_ranks()")

    def engine_ranks(self) -> list:
        return list(self.ranks)

    def kv_block_size(self) -> int | None:
        return self.ranks[0].kv_block_size()

    def held_prefix_tokens(self, req: Request) -> int:
        """What the rank the placement rule would pick now holds."""
        if req.input_length - 1 <= 0:
            return 0
        return self.ranks[self.rank_for(req)].held_prefix_tokens(req)

    def transfers_waiting(self) -> int:
        """Disaggregated decode: transferred requests awaiting admission on any rank."""
        return sum(e.transfers_waiting() for e in self.ranks)

    # -- the loop's verbs ----------------------------------------------------------------------
    def rank_for(self, req: Request) -> int:
        """The rank the placement rule would give ``req`` now (nothing is committed)."""
        return self.placement.peek(self.ranks, req)

    def add_request(self, req: Request, now: float, kv_ready: int = 0) -> None:
        r = self.placement.choose(self.ranks, req)
        self.rec.extra(RANK_COLUMN, np.int64, -1)[req.index] = r
        self.ranks[r].add_request(req, now, kv_ready)

    def has_work(self) -> bool:
        return any(e.has_work() for e in self.ranks)

    def schedule(self, now: float) -> PassPlan | None:
        """Every rank decides its own sub-pass now; idle ranks join a pass that any rank runs."""
        if self.balance is None:
            plans = tuple(e.schedule(now) for e in self.ranks)
        else:
            plans = self._schedule_balanced(now)
        if all(p is None for p in plans) and any(getattr(e, "lag", None) is not None and (e.inbox or e.ready)
                                                  for e in self.ranks):
            # SGLang's overlap loop: no rank chose a batch from what it had pulled, so no pass runs
            # and every rank spins to a pull that sees every arrival (engines/sglang/overlap.py)
            plans = tuple(e.schedule(now) for e in self.ranks)
        self._plans = plans
        if all(p is None for p in plans):
            return None
        for e, p in zip(self.ranks, plans):
            lag = getattr(e, "lag", None)  # SGLang's overlap loop: an idle rank joins the pass in lock-step
            if p is None and lag is not None:
                lag.joined_idle(now)
        return rank_union(plans)

    def _schedule_balanced(self, now: float) -> tuple[PassPlan | None, ...]:
        """TensorRT-LLM ADP balance: the ranks' choices are gathered, then contexts run or wait."""
        busy = [e.has_work() for e in self.ranks]
        self._held = False
        if not any(busy):
            return tuple(None for _ in self.ranks)
        # an idle rank runs a dummy generation request (PyExecutor _pad_attention_dp_dummy_request)
        counts = [trtllm_iteration_counts(e) if b else (0, 1) for e, b in zip(self.ranks, busy)]
        facts = (all(g < e.max_batch for e, (_, g) in zip(self.ranks, counts)),
                 all(c > 0 for c, _ in counts),
                 all(g > 0 for _, g in counts))
        run_contexts = self.balance.step(*facts)
        self._facts = facts
        self._held = not run_contexts and any(c > 0 for c, _ in counts)
        return tuple(e.schedule(now) if run_contexts or c == 0 else schedule_generation_only(e, now)
                     for e, (c, _) in zip(self.ranks, counts))

    def complete(self, plan: PassPlan, end: float) -> None:
        for e, p in zip(self.ranks, plan.ranks):
            if p is not None:
                e.complete(p, end)

    def complete_stretch(self, plan: PassPlan, ends: np.ndarray) -> None:
        for e, p in zip(self.ranks, plan.ranks):
            if p is not None:
                e.complete_stretch(p, ends)
        if self.balance is not None:
            # The first pass was decided by schedule(); the others repeat its decision.
            for _ in range(int(ends.size) - 1):
                ran = self.balance.step(*self._facts)
                assert not (ran and self._held), "ADP balance: a stretch ran past a context release"

    def input_lag_passes(self) -> int:
        """Passes after the one in flight that input cannot change: the fewest of any rank."""
        return min(int(e.input_lag_passes()) for e in self.ranks)

    def decode_stretch_limit(self) -> int:
        """The smallest of the busy ranks' limits; 1 if an idle rank holds queued work."""
        limit = None
        for e, p in zip(self.ranks, self._plans):
            if p is None:
                if e.has_work():  # it may become schedulable; take it pass by pass
                    return 1
                continue
            k = e.decode_stretch_limit()
            if k <= 1:
                return 1
            limit = k if limit is None else min(limit, k)
        if limit is not None and self._held:
            limit = min(limit, self._held_limit())
        return limit or 1

    def _held_limit(self) -> int:
        """Passes the ADP balance keeps holding the waiting contexts (so the stretch may last).

        Within a stretch the gathered facts stay as they are: generation counts do not
        change; a context that did not fit keeps not fitting (its no-evict reservation
        and the generation steps' tokens are fixed); a context that fitted can stop fitting
        only if its prefix hit shrinks as generation blocks recycle cached blocks, which
        only non-chunked ranks with block reuse can see — and which changes the decision
        only while every rank has a context (gathering), so that case goes pass by pass.
        """
        all_room, all_ctx, _ = self._facts
        if all_room and all_ctx and any(not e.chunking and e.caching for e in self.ranks):
            return 1
        return max(self.balance.held_passes(all_room, all_ctx), 1)

    def snapshot(self) -> EngineSnapshot:
        snaps = [e.snapshot() for e in self.ranks]
        return EngineSnapshot(**{f: sum(getattr(s, f) for s in snaps) for f in (
            "running", "waiting", "kv_used_tokens", "kv_capacity_tokens", "prompt_tokens",
            "cached_prompt_tokens", "outstanding_tokens")})

    def abort(self, index: int, now: float, reason: str = "cancelled by the client") -> bool:
        """The rank that holds the request drops it (the worker's ranks are between passes
        together: they run in lock-step)."""
        return any(e.abort(index, now, reason) for e in self.ranks)

    def abort_all(self, now: float, reason: str) -> None:
        for e in self.ranks:
            e.abort_all(now, reason)

    def check_invariants(self) -> None:
        """Every rank's own KV conservation (each request lives on exactly one rank by construction)."""
        for e in self.ranks:
            e.check_invariants()
