"""TensorRT-LLM's bulk paths equal a request-by-request walk, pass by pass.

The engine takes three shortcuts that must change nothing:

* ``_capacity`` under GUARANTEED_NO_EVICT lists the generating requests with one
  comprehension and sums their reservations with C-level ``map``s;
* ``schedule`` takes the leading generation steps in one slice (as many as the token budget
  and the batch size allow) instead of walking them one by one;
* with the block pool's LRU fast path, the blocks of a pass's generation steps, and of a
  whole decode stretch, are taken in one ``allocate`` call instead of one per request.

The reference engine below walks every request as the capacity and micro-batch schedulers
describe it (the loops these shortcuts replaced) and, with a KV event sink, forces the
pool's general allocation path.  Both must produce the same plans, request states and pool
states after every pass of random workloads, with random stretch lengths.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from blockkv_harness import build_engines, pool_state
from servesim.engines.speculative import SpecDecoder, SpeculativeConfig
from servesim.engines.trtllm.scheduler import TRTLLMEngine
from servesim.engines.trtllm.options import TRTLLMOptions
from simharness import drive_lockstep, pool_kinds, random_block_workload


class WalkingEngine(TRTLLMEngine):
    """TensorRT-LLM with every shortcut off: request-by-request walks, one allocation per step."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.pool.on_event = lambda event: None  # forces the pool's general allocation path

    def _capacity(self):
        if not self.no_evict:
            return super()._capacity()
        fitting: list = []
        available = self.pool.num_free_blocks
        for tr in self.active:  # generating requests, each reserving its blocks to completion
            if not tr.context:
                if len(fitting) >= self.max_batch:
                    break
                fitting.append(tr)
                available -= self._blocks_for(tr.req.input_length + tr.max_new) - len(tr.blocks)
        for tr in self.active:  # then contexts while their reservations fit
            if tr.context:
                if len(fitting) >= self.max_batch:
                    break
                need = self._blocks_for(tr.req.input_length + tr.max_new) - len(tr.blocks)
                if need > available:
                    break
                fitting.append(tr)
                available -= need
        self._lead_gens = 0  # schedule walks every request of the list
        return fitting, False

    def decode_stretch_limit(self) -> int:
        batch = self._last
        if batch is not None and batch.gens:
            n_gen_active = sum(1 for tr in self.active if not tr.context)
            if len(batch.gens) != n_gen_active:
                return 1
        return super().decode_stretch_limit()


def random_options(rng: random.Random) -> tuple[TRTLLMOptions, int]:
    tpb = rng.choice([1, 2, 4, 16, 32])
    opt = TRTLLMOptions(
        tokens_per_block=tpb,
        max_num_tokens=rng.choice([rng.randint(max(tpb, 2), max(tpb, 12)), rng.randint(max(tpb, 4), 200)]),
        max_batch_size=rng.randint(1, 16),
        capacity_scheduler_policy=rng.choice(["GUARANTEED_NO_EVICT", "GUARANTEED_NO_EVICT", "MAX_UTILIZATION"]),
        enable_chunked_context=rng.random() < 0.5,
        enable_block_reuse=rng.random() < 0.7,
        batch_wait_timeout_iters=rng.choice([0, 0, 3]),
        batch_wait_max_tokens_ratio=rng.choice([0.0, 0.5]),
    )
    return opt, tpb * rng.choice([rng.randint(3, 60), rng.randint(60, 400)]) + rng.randint(0, tpb - 1)


def engine_state(eng: TRTLLMEngine) -> tuple:
    reqs = [(tr.req.index, tr.computed, tr.generated, tr.context, tr.ctx_len, list(tr.blocks), tr.n_cached)
            for tr in eng.active]
    return (reqs, *pool_state(eng), eng.retractions, eng.batch_wait_count)


def plan_state(plan) -> tuple:
    b = plan.requests
    return (plan.prefill_new.tolist(), plan.prefill_cached.tolist(), plan.decode_ctx.tolist(),
            [tr.req.index for tr in b.contexts], [tr.req.index for tr in b.gens], b.held, b.paused)


def drive(opt: TRTLLMOptions, kv: int, reqs, rng: random.Random, drafts: int = 0,
          engine_cls: type[TRTLLMEngine] = TRTLLMEngine) -> int:
    """The reference and the engine (``engine_cls``) side by side; returns how many stretches ran.

    ``drafts`` > 0: speculative generation steps (each costs ``1 + drafts`` tokens, so the
    token budget, not the batch size, can stop the leading generation steps)."""
    variants = [(WalkingEngine, True)] + [(engine_cls, python) for python in pool_kinds()]
    engines = build_engines(variants, opt, kv)
    if drafts:
        for eng, _ in engines:
            eng.spec = SpecDecoder(SpeculativeConfig(method="mtp", draft_tokens=drafts, acceptance_rate=0.6), 1, 0)
    lru = opt.eviction_policy == "lru"
    assert not engines[0][0].pool.lru_fast_path and all(e.pool.lru_fast_path == lru for e, _ in engines[1:])
    assert [e.pool.compiled for e, _ in engines] == [False] + [lru and not p for _, p in variants[1:]]
    _passes, stretches = drive_lockstep(engines, reqs, rng, plan_state, engine_state)
    return stretches


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 14))
def test_bulk_paths_equal_request_walk(seed: int, n: int) -> None:
    rng = random.Random(seed)
    reqs = random_block_workload(rng, n, max_out=80)
    opt, kv = random_options(rng)
    drive(opt, kv, reqs, rng, drafts=rng.choice([0, 0, 0, rng.randint(1, 4)]))


def test_bulk_paths_on_a_long_generation_batch() -> None:
    """Many requests generating together across many block boundaries; batch size and token
    budget both bind at times, so the bulk take stops early on either."""
    rng = random.Random(11)
    reqs = random_block_workload(rng, 30, max_in=60, max_out=200)
    opt = TRTLLMOptions(tokens_per_block=4, max_num_tokens=8, max_batch_size=20, enable_chunked_context=True)
    assert drive(opt, 4 * 4000, reqs, rng) > 5


def test_token_budget_stops_the_bulk_take() -> None:
    """With speculation a generation step costs 1 + drafts tokens: contexts completing in one
    iteration can leave more generating requests than the budget holds."""
    rng = random.Random(5)
    reqs = random_block_workload(rng, 30, max_in=40, max_out=60)
    opt = TRTLLMOptions(tokens_per_block=4, max_num_tokens=12, max_batch_size=20, enable_chunked_context=True)
    seen = []

    class Spy(TRTLLMEngine):  # records the leading generation steps each capacity pass takes
        def _capacity(self):
            out = super()._capacity()
            seen.append(self._lead_gens)
            return out

    drive(opt, 4 * 4000, reqs, rng, drafts=3, engine_cls=Spy)
    assert max(seen) > 12 // 4  # the budget bound the leading generation steps at least once
