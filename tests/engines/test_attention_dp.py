"""Attention data parallelism: placement, lock-step passes, per-rank KV, fast == step."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import numpy as np
import pytest

from servesim.cluster.routers import RoundRobinRouter
from servesim.cluster.worker import Worker
from servesim.engines.attention_dp import (
    RANK_COLUMN,
    AttentionDPEngine,
    RoundRobin,
    ShortestQueue,
    TRTLLMBalance,
    VLLMScore,
)
from servesim.engines.base import EngineLimits
from servesim.engines.sglang.scheduler import SGLangEngine
from servesim.engines.sglang.options import SGLangOptions
from servesim.engines.trtllm.scheduler import TRTLLMEngine
from servesim.engines.trtllm.options import TRTLLMOptions
from servesim.engines.vllm.scheduler import VLLMEngine
from servesim.engines.vllm.options import VLLMOptions
from servesim.hardware.gpu import load_gpu
from servesim.metrics.recorder import RequestRecorder, Status
from servesim.models.arch import load_model
from servesim.perf.analytic import AnalyticStepTime
from servesim.perf.frontend import SchedulerOverheadStepTime
from servesim.perf.plan import PassPlan
from servesim.perf.simple import FixedStepTime, LinearStepTime
from servesim.sim.simulation import Simulation
from tests.simharness import make_request


def dp_engine(kind: str, rec: RequestRecorder, dp: int = 2, kv: int = 20_000, context: int = 8192,
              placement: str | None = None, **opts) -> AttentionDPEngine:
    limits = EngineLimits(kv_capacity_tokens=kv, context_length=context)
    if kind == "sglang":
        chunk = opts.pop("chunk", 2048)
        ranks = [SGLangEngine(0, rec, limits, SGLangOptions(**opts), chunk) for _ in range(dp)]
    elif kind == "vllm":
        opts.setdefault("max_num_batched_tokens", 2048)
        ranks = [VLLMEngine(0, rec, limits, VLLMOptions(**opts)) for _ in range(dp)]
    else:
        ranks = [TRTLLMEngine(0, rec, limits, TRTLLMOptions(**opts)) for _ in range(dp)]
    return AttentionDPEngine(0, rec, limits, ranks, placement)


def simulate(engine_factory, reqs, step_time, fast: bool):
    rec = RequestRecorder()
    eng = engine_factory(rec)
    worker = Worker(0, eng, step_time, 2, fast_forward=fast)
    Simulation(iter(reqs), "open", None, [worker], RoundRobinRouter(), rec).run()
    return rec, eng, worker


def ranks_of(rec: RequestRecorder) -> list[int]:
    return rec.extra(RANK_COLUMN, np.int64, -1)[:rec.size].tolist()


# -- (a) placement ----------------------------------------------------------------------------
def test_sglang_round_robin_placement():
    reqs = [make_request(i, 0.001 * i, 100, 5) for i in range(7)]
    rec, eng, _ = simulate(lambda r: dp_engine("sglang", r, dp=3), reqs, FixedStepTime(0.01), fast=False)
    assert ranks_of(rec) == [0, 1, 2, 0, 1, 2, 0]
    assert (rec.column("status")[:7] == Status.COMPLETED).all()


def _fake(waiting=0, running=0):
    """A rank that reports its queue counts through the engine interface (engines/base.py)."""
    return SimpleNamespace(queue_counts=lambda: (waiting, running))


def test_vllm_score_prefers_fewest_waiting_times_four_plus_running():
    rule = VLLMScore()
    # scores: 4*1 + 0 = 4, 4*0 + 3 = 3, 4*0 + 5 = 5 -> rank 1
    assert rule.peek([_fake(1, 0), _fake(0, 3), _fake(0, 5)], None) == 1
    # ties: the first minimum from rank 0
    assert rule.peek([_fake(0, 2), _fake(0, 2)], None) == 0
    # all requests at once on idle ranks alternate: each placement adds a waiting request
    reqs = [make_request(i, 0.0, 100, 3) for i in range(4)]
    rec, _, _ = simulate(lambda r: dp_engine("vllm", r, dp=2), reqs, FixedStepTime(0.01), fast=False)
    assert ranks_of(rec) == [0, 1, 0, 1]


def test_sglang_shortest_queue_counts_waiting_and_running():
    assert ShortestQueue().peek([_fake(2, 1), _fake(0, 2), _fake(1, 1)], None) == 1
    assert ShortestQueue().peek([_fake(1, 1), _fake(0, 2)], None) == 0


def _trt(*prompts):
    return SimpleNamespace(active=[SimpleNamespace(req=SimpleNamespace(input_length=n), blocks=[1]) for n in prompts],
                           ready=[])


def test_trtllm_balance_by_active_prompt_tokens_under_expected_share():
    rule = TRTLLMBalance()
    # expected = max(ceil((1 + 2 + 0 + 1) / 3), 2) = 2: ranks 0 (100 tokens) and 2 (0) are eligible
    assert rule.peek([_trt(100), _trt(50, 60), _trt()], None) == 2
    # expected = max(ceil(4 / 2), 2) = 2: rank 1 holds fewer tokens but already 2 requests
    assert rule.peek([_trt(100), _trt(30, 30)], None) == 0
    # equal counts: fewer prompt tokens wins
    assert rule.peek([_trt(500), _trt(80)], None) == 1
    assert RoundRobin().peek([_trt(), _trt()], None) == 0


# -- (b) a pass lasts as long as its slowest rank -----------------------------------------------------
class SlowestRankModel:
    """Hand-checkable rank-aware model: 1 ms per token of all ranks + 10 ms per token of the busiest."""

    def pass_time(self, plan: PassPlan) -> float:
        local = max((r.num_tokens for r in plan.ranks if r is not None), default=0)
        return 0.001 * plan.num_tokens + 0.01 * local

    def decode_stretch_times(self, decode_ctx, steps):
        raise AssertionError("step mode only")


def test_pass_waits_for_the_slowest_rank():
    # r0 (rank 0): 100-token prompt; r1 (rank 1): 30 tokens; both prefill in the first pass.
    reqs = [make_request(0, 0.0, 100, 2), make_request(1, 0.0, 30, 2)]
    rec, _, _ = simulate(lambda r: dp_engine("sglang", r), reqs, SlowestRankModel(), fast=False)
    first = rec.column("first_token")[:2]
    assert ranks_of(rec) == [0, 1]
    # pass 1: 0.001 × 130 + 0.01 × 100 = 1.13 s for both ranks, the short prompt included
    assert first.tolist() == pytest.approx([1.13, 1.13])
    # pass 2: both decode one token: 0.001 × 2 + 0.01 × 1 = 0.012 s
    assert rec.column("last_token")[:2].tolist() == pytest.approx([1.142, 1.142])


@pytest.fixture(scope="module")
def moe_model():
    return AnalyticStepTime(load_model("deepseek-ai/DeepSeek-V3"), load_gpu("h200"), tp=1, ep=2, attention_dp=2,
                            weight_dtype="fp8", kv_dtype="fp8")


def test_analytic_idle_rank_adds_only_shared_layers(moe_model):
    st = moe_model
    long = PassPlan(prefill_new=np.array([4000]), prefill_cached=np.array([0]))
    reqs = [make_request(0, 0.0, 4000, 1)]
    rec, eng, _ = simulate(lambda r: dp_engine("sglang", r, chunk=8192), reqs, st, fast=False)
    # rank 0 prefills 4000 tokens, rank 1 is idle: its attention costs nothing, the experts
    # run over the 4000 tokens and the collectives carry rank 0's tokens
    expected = st.rank_local_time(long) + st.rank_shared_time(4000, 4000, False, 0)
    assert rec.column("first_token")[0] == pytest.approx(expected, rel=1e-12)
    assert st.rank_local_time(PassPlan()) == 0.0
    # the old even-spread estimate of the same pass is cheaper: rank 0 cannot share its prompt
    assert st.pass_time(long) < expected


def test_analytic_slowest_rank_sets_the_pass(moe_model):
    st = moe_model
    a = PassPlan(prefill_new=np.array([3000]), prefill_cached=np.array([500]))
    b = PassPlan(decode_ctx=np.array([1200, 800, 40]))
    both = _union(a, b)
    la, lb = st.rank_local_time(a), st.rank_local_time(b)
    assert la > lb > 0
    assert st.pass_time(both) == pytest.approx(la + st.rank_shared_time(3003, 3000, False, 3), rel=1e-12)
    assert st.pass_time(_union(b, a)) == pytest.approx(st.pass_time(both), rel=1e-12)
    # two balanced ranks of 1500 new tokens each beat one rank of 3000
    half = PassPlan(prefill_new=np.array([1500]), prefill_cached=np.array([0]))
    full = PassPlan(prefill_new=np.array([3000]), prefill_cached=np.array([0]))
    assert st.pass_time(_union(half, half)) < st.pass_time(_union(full, None))


def _union(*ranks):
    from servesim.perf.plan import rank_union

    return rank_union(tuple(ranks))


def test_analytic_rank_stretch_equals_pass_by_pass(moe_model):
    from servesim.perf.plan import plan_stretch_times

    rng = np.random.default_rng(5)
    a = PassPlan(decode_ctx=rng.integers(1, 5000, size=7))
    b = PassPlan(decode_ctx=rng.integers(1, 5000, size=2))
    plan = _union(a, None, b)
    for model in (moe_model, SchedulerOverheadStepTime(moe_model, 0.002, 1e-5),
                  LinearStepTime(0.004, per_decode_request_s=1e-5, per_context_token_s=1e-8)):
        fast = plan_stretch_times(model, plan, 50)
        ref = np.array([model.pass_time(plan.shifted(s)) for s in range(50)])
        np.testing.assert_allclose(fast, ref, rtol=1e-12, atol=0)


# -- (c) per-rank KV capacity ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["sglang", "vllm", "trtllm"])
def test_prompt_fitting_the_worker_but_not_one_rank_is_rejected(kind):
    # each rank holds 1000 tokens (2000 together); a 1500-token prompt fits no rank
    reqs = [make_request(0, 0.0, 1500, 4), make_request(1, 0.0, 400, 4)]
    rec, _, _ = simulate(lambda r: dp_engine(kind, r, kv=1000, context=4096), reqs, FixedStepTime(0.01), fast=False)
    assert rec.column("status")[:2].tolist() == [Status.REJECTED, Status.COMPLETED]


def test_full_rank_queues_while_the_other_rank_has_room():
    # rank 0 gets requests 0 and 2, rank 1 request 1 (round robin); each rank holds 1000
    # tokens, so request 2 (700 tokens) waits for request 0 (700 + 50) to leave rank 0 even
    # though rank 1 is empty by then
    reqs = [make_request(0, 0.0, 700, 50), make_request(1, 0.0, 100, 1), make_request(2, 0.001, 700, 5)]
    rec, _, _ = simulate(lambda r: dp_engine("sglang", r, kv=1000, context=4096), reqs, FixedStepTime(0.01),
                         fast=False)
    assert ranks_of(rec) == [0, 1, 0]
    finish = rec.column("finish")
    assert rec.column("first_scheduled")[2] >= finish[0]
    assert finish[1] < rec.column("first_scheduled")[2]


# -- (d) fast == step, (e) every request terminal ----------------------------------------------------------
def random_requests(seed: int, n: int = 80):
    rng = np.random.default_rng(seed)
    reqs, t = [], 0.0
    for i in range(n):
        t += float(rng.exponential(0.03))
        group = int(rng.integers(0, 4))
        inp = int(rng.integers(40, 2500))
        ids = [900_000 + group] + [1_000_000 * (i + 1) + b for b in range(-(-inp // 512) - 1)]
        reqs.append(make_request(i, t, inp, int(rng.integers(1, 250)), hash_ids=ids))
    return reqs


def fast_and_step_agree(factory, reqs, st):
    """Run ``reqs`` in step and in fast mode and check what must agree: ranks, token times,
    generated counts, pass counts; every request ends in exactly one terminal state, the fast
    run's invariants hold and it ends empty.  Returns (slow, slow engine, fast, fast engine)."""
    slow, eng_s, w_s = simulate(factory, copy.deepcopy(reqs), st, fast=False)
    fast, eng_f, w_f = simulate(factory, copy.deepcopy(reqs), st, fast=True)
    assert ranks_of(fast) == ranks_of(slow)
    for name in ("first_token", "second_token", "last_token", "finish", "first_scheduled"):
        np.testing.assert_allclose(fast.column(name), slow.column(name), rtol=1e-9, equal_nan=True)
    assert (fast.column("generated") == slow.column("generated")).all()
    status = fast.column("status")[:fast.size]
    assert (status == Status.COMPLETED).sum() + (status == Status.REJECTED).sum() == len(reqs)
    eng_f.check_invariants()
    snap = eng_f.snapshot()
    assert snap.running == snap.waiting == 0
    assert w_f.passes == w_s.passes
    return slow, eng_s, fast, eng_f


@pytest.mark.parametrize("kind", ["sglang", "vllm", "trtllm"])
@pytest.mark.parametrize("model", ["linear", "analytic"])
def test_fast_mode_matches_step_mode(kind, model, moe_model):
    reqs = random_requests(11)
    st = moe_model if model == "analytic" else LinearStepTime(
        base_s=0.004, per_prefill_token_s=2e-7, per_decode_request_s=3e-5, per_context_token_s=1e-8)
    st = SchedulerOverheadStepTime(st, 0.001, 2e-6)

    def factory(rec):
        return dp_engine(kind, rec, kv=12_000)

    slow, eng_s, fast, eng_f = fast_and_step_agree(factory, reqs, st)
    assert (fast.column("retractions") == slow.column("retractions")).all()
    eng_s.check_invariants()
    snap = eng_f.snapshot()
    assert snap.kv_capacity_tokens == sum(e.snapshot().kv_capacity_tokens for e in eng_f.ranks)
    assert snap.prompt_tokens == eng_f.prompt_tokens == sum(e.prompt_tokens for e in eng_f.ranks) > 0


def test_fast_forward_is_used_with_ranks(moe_model):
    reqs = [make_request(i, 0.0, 200 + 10 * i, 300) for i in range(6)]

    class Counting(FixedStepTime):
        """Counts pricing calls; prices a whole attention-DP stretch in one call."""

        calls = 0

        def pass_time(self, plan):
            Counting.calls += 1
            return super().pass_time(plan)

        def rank_stretch_times(self, plan, steps):
            Counting.calls += 1
            return np.full(steps, self.seconds)

    simulate(lambda r: dp_engine("sglang", r), reqs, Counting(0.01), fast=True)
    fast_calls = Counting.calls
    Counting.calls = 0
    simulate(lambda r: dp_engine("sglang", r), reqs, Counting(0.01), fast=False)
    assert fast_calls < Counting.calls / 10


def test_terminated_drains_every_rank_once():
    rec = RequestRecorder()
    eng = dp_engine("vllm", rec, kv=1000, context=4096)
    for i, n in enumerate((1500, 2000)):
        rec.register(i, f"r{i}", None, 0, n, 3, False)
        eng.add_request(make_request(i, 0.0, n, 3), 0.0)
    assert [r.index for r in eng.terminated] == [0, 1]  # rejected on ranks 0 and 1
    eng.terminated = []
    assert eng.terminated == [] and not eng.has_work()
    assert math.isnan(rec.column("first_token")[0])


def test_balanced_ranks_price_as_an_even_spread(moe_model):
    """Identical sub-plans on every rank: the per-rank price equals the even-spread estimate."""
    from servesim.perf.plan import rank_union

    sub = PassPlan(decode_ctx=np.array([8700, 300, 4100]))
    plan = rank_union((sub, copy.deepcopy(sub)))
    even = moe_model.pass_time(PassPlan(decode_ctx=plan.decode_ctx))
    assert moe_model.pass_time(plan) == pytest.approx(even, rel=1e-12)
    # one busy rank and one idle rank cost more than the even-spread estimate of the same
    # three requests, which would split them over both ranks
    lone = rank_union((sub, None))
    assert moe_model.pass_time(lone) > moe_model.pass_time(PassPlan(decode_ctx=sub.decode_ctx))


# -- (f) TensorRT-LLM ADP balance (attention_dp_config.enable_balance) ----------------------------------
def test_adp_balance_counters():
    from servesim.engines.attention_dp import ADPBalance

    b = ADPBalance(timeout_iters=3, batching_wait_iters=2)
    # not every rank has a context: held, the wait counter releases every 3rd iteration
    assert [b.step(True, False, True) for _ in range(7)] == [False, False, True, False, False, True, False]
    assert b.waited == 1
    # a rank without generation work releases at once and restarts the counter
    assert b.step(True, False, False) and b.waited == 0
    # every rank has a context: 2 more iterations to gather, then release
    assert [b.step(True, True, True) for _ in range(4)] == [False, False, True, False]
    assert b.waited == 0 and b.batched == 1
    # every rank has a context but one has no generation work: release without gathering
    assert b.step(True, True, False) and b.batched == 1
    # a rank at max_batch_size generation requests: treated as "not every rank ready"
    b2 = ADPBalance(timeout_iters=2, batching_wait_iters=0)
    assert [b2.step(False, True, True) for _ in range(2)] == [False, True]
    assert ADPBalance(0, 0).step(True, False, True)  # timeout 0: never held


def test_adp_balance_holds_a_lone_context_until_the_timeout():
    # Both ranks decode long requests (0, 1).  Request 2 arrives on one rank alone and waits
    # for the wait counter; request 3 likewise, one counter period later; requests 4 and 5
    # arrive on different ranks and run together as soon as both ranks have one.
    reqs = [make_request(0, 0.0, 100, 200), make_request(1, 0.0, 100, 200),
            make_request(2, 0.0305, 300, 5), make_request(3, 0.1105, 300, 5),
            make_request(4, 0.2405, 300, 5), make_request(5, 0.2605, 300, 5)]

    def run(balance: bool, fast: bool):
        return simulate(lambda r: dp_engine("trtllm", r, attention_dp_enable_balance=balance,
                                            attention_dp_timeout_iters=10, attention_dp_batching_wait_iters=0),
                        copy.deepcopy(reqs), FixedStepTime(0.01), fast=fast)[0]

    off, on = run(False, False), run(True, False)
    assert ranks_of(on) == [0, 1, 0, 1, 0, 1]  # request 2 still runs on rank 0 when 3 arrives
    assert ranks_of(off) == [0, 1, 0, 0, 0, 1]
    # without balance each context runs in the pass after it arrives
    assert off.column("first_scheduled")[2:6].tolist() == pytest.approx([0.04, 0.12, 0.25, 0.27])
    # pass 1 (t=0) runs both prompts at once (no rank has generation work yet); each later
    # iteration advances the wait counter, which reaches 10 at t=0.10 and again at t=0.20;
    # at t=0.27 both ranks hold a context, which releases them (batching_wait_iters 0)
    assert on.column("first_scheduled")[2:6].tolist() == pytest.approx([0.10, 0.20, 0.27, 0.27])
    fast = run(True, True)
    for name in ("first_scheduled", "first_token", "last_token", "finish"):
        np.testing.assert_allclose(fast.column(name), on.column(name), rtol=1e-12)


def test_adp_balance_iteration_counts_match_the_scheduler():
    """The side-effect-free walk gives the context and generation counts schedule() then takes."""
    from servesim.engines.attention_dp import trtllm_iteration_counts

    for opts in ({}, {"enable_chunked_context": True, "max_num_tokens": 1024},
                 {"max_num_tokens": 2600, "max_batch_size": 5}):
        rec = RequestRecorder()
        eng = TRTLLMEngine(0, rec, EngineLimits(kv_capacity_tokens=9000, context_length=4096),
                           TRTLLMOptions(**opts))
        reqs = random_requests(3, n=40)
        t, i, checked = 0.0, 0, 0
        while i < len(reqs) or eng.has_work():
            while i < len(reqs) and reqs[i].arrival <= t:
                rec.register(reqs[i].index, str(i), None, reqs[i].arrival, reqs[i].input_length,
                             reqs[i].output_length, False)
                eng.add_request(reqs[i], t)
                i += 1
            want = trtllm_iteration_counts(eng)
            plan = eng.schedule(t)
            got = (0, 0) if plan is None else (len(plan.prefill_new), len(plan.decode_ctx))
            assert got == want, (opts, t)
            checked += got[0] > 0
            t += 0.01
            if plan is not None:
                eng.complete(plan, t)
            eng.check_invariants()
        assert checked > 5


@pytest.mark.parametrize("opts", [
    {"attention_dp_timeout_iters": 7, "attention_dp_batching_wait_iters": 0},
    {"attention_dp_timeout_iters": 20, "attention_dp_batching_wait_iters": 4, "enable_block_reuse": False},
    {"attention_dp_timeout_iters": 12, "attention_dp_batching_wait_iters": 3, "enable_chunked_context": True,
     "max_num_tokens": 1024},
    {"attention_dp_timeout_iters": 9, "attention_dp_batching_wait_iters": 2},
])
@pytest.mark.parametrize("dp", [2, 3])
def test_adp_balance_fast_mode_matches_step_mode(opts, dp):
    reqs = random_requests(17, n=90)
    st = SchedulerOverheadStepTime(LinearStepTime(
        base_s=0.004, per_prefill_token_s=2e-7, per_decode_request_s=3e-5, per_context_token_s=1e-8), 0.001, 2e-6)

    def factory(rec):
        return dp_engine("trtllm", rec, dp=dp, kv=12_000, attention_dp_enable_balance=True, **opts)

    slow, eng_s, fast, eng_f = fast_and_step_agree(factory, reqs, st)
    assert (slow.column("status")[:slow.size] == fast.column("status")[:fast.size]).all()
    assert (eng_f.balance.waited, eng_f.balance.batched) == (eng_s.balance.waited, eng_s.balance.batched)
    # the balance changed something: contexts were held
    plain, _, _ = simulate(lambda r: dp_engine("trtllm", r, dp=dp, kv=12_000, **opts), copy.deepcopy(reqs), st,
                           fast=True)
    assert not np.allclose(plain.column("first_scheduled"), slow.column("first_scheduled"), equal_nan=True)


def test_adp_balance_needs_no_evict():
    from servesim.errors import ConfigError

    with pytest.raises(ConfigError, match="GUARANTEED_NO_EVICT"):
        dp_engine("trtllm", RequestRecorder(), attention_dp_enable_balance=True,
                  capacity_scheduler_policy="MAX_UTILIZATION")
