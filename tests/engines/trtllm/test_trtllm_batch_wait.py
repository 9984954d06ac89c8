"""TensorRT-LLM batch waiting (``batch_wait_timeout_iters`` / ``batch_wait_max_tokens_ratio``):
hand-timed schedules, fast-forward equal to step-by-step, and no effect with attention DP."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

from servesim.cluster.routers import RoundRobinRouter
from servesim.cluster.worker import Worker
from servesim.engines.base import EngineLimits
from servesim.engines.trtllm.scheduler import TRTLLMEngine
from servesim.engines.trtllm.options import TRTLLMOptions
from servesim.metrics.recorder import RequestRecorder, Status
from servesim.perf.simple import FixedStepTime, LinearStepTime
from servesim.sim.simulation import Simulation
from servesim.workload.request import Request
from simharness import RecordingStepTime, random_block_workload
from tests.engines.test_attention_dp import dp_engine, random_requests, simulate as simulate_dp

STEP = 0.01


def req(i: int, arrival: float, n_in: int, n_out: int) -> Request:
    return Request(index=i, request_id=f"r{i}", arrival=arrival, input_length=n_in, output_length=n_out,
                   hash_ids=tuple(1000 * (i + 1) + k for k in range(-(-n_in // 16))), block_size=16)


def run(requests, fast=False, kv_tokens=100_000, **opts):
    rec = RequestRecorder()
    opts.setdefault("tokens_per_block", 16)
    opts.setdefault("max_num_tokens", 100)
    eng = TRTLLMEngine(0, rec, EngineLimits(kv_capacity_tokens=kv_tokens, context_length=4096),
                       TRTLLMOptions(**opts))
    st = RecordingStepTime(STEP)
    Simulation(iter(requests), "open", None, [Worker(0, eng, st, 1, fast_forward=fast)], RoundRobinRouter(),
               rec).run()
    return rec, eng, st.plans


def test_defaults_are_off():
    o = TRTLLMOptions()
    assert (o.batch_wait_timeout_iters, o.batch_wait_max_tokens_ratio) == (0, 0.0)
    with pytest.raises(Exception):
        TRTLLMOptions(batch_wait_max_tokens_ratio=1.5)
    with pytest.raises(Exception):
        TRTLLMOptions(batch_wait_timeout_iters=-1)


@pytest.mark.parametrize("fast", [False, True])
def test_context_held_until_the_timeout(fast):
    # r0 (10-token prompt) runs alone at t=0 (no generation work: no waiting) and then decodes.
    # r1 arrives at 0.015; from t=0.02 the schedulers choose r1's context with r0's step:
    # 10 + 1 = 11 tokens < 0.5 * 100, so it is held at 0.02, 0.03, 0.04 (counter 1, 2, 3)
    # and runs at 0.05, when the counter has reached the timeout 3.
    reqs = [req(0, 0.0, 10, 10), req(1, 0.015, 10, 3)]
    rec, eng, plans = run(reqs, fast=fast, batch_wait_timeout_iters=3, batch_wait_max_tokens_ratio=0.5)
    assert rec.column("first_scheduled").tolist() == pytest.approx([0.0, 0.05])
    assert rec.column("first_token").tolist() == pytest.approx([0.01, 0.06])
    assert rec.column("finish").tolist() == pytest.approx([0.10, 0.08])
    assert eng.batch_wait_count == 0
    if not fast:
        # passes at 0.02, 0.03, 0.04 are generation only, the one at 0.05 mixed
        assert [len(p.prefill_new) for p in plans[:6]] == [1, 0, 0, 0, 0, 1]
    # without batch waiting r1's context runs in the pass at 0.02
    off, _, _ = run(reqs, fast=fast)
    assert off.column("first_token").tolist() == pytest.approx([0.01, 0.03])


def test_token_threshold_releases_at_once():
    # 49 + 1 = 50 tokens reach 0.5 * 100: no wait
    rec, _, _ = run([req(0, 0.0, 10, 10), req(1, 0.015, 49, 3)], batch_wait_timeout_iters=3,
                    batch_wait_max_tokens_ratio=0.5)
    assert rec.column("first_token")[1] == pytest.approx(0.03)
    # 48 + 1 = 49 tokens do not: held until the timeout
    rec, _, _ = run([req(0, 0.0, 10, 10), req(1, 0.015, 48, 3)], batch_wait_timeout_iters=3,
                    batch_wait_max_tokens_ratio=0.5)
    assert rec.column("first_token")[1] == pytest.approx(0.06)


def test_chunked_context_counts_the_whole_prompt():
    # With chunked context r1's chosen chunk is 16 tokens (the 19 left after r0's step, rounded
    # down to a block): 16 + 1 < 1.0 * 20 would wait, but TensorRT-LLM counts the whole prompt,
    # 80 + 1 >= 20, so the first chunk runs at 0.02.
    rec, _, plans = run([req(0, 0.0, 10, 10), req(1, 0.015, 80, 3)], max_num_tokens=20, enable_chunked_context=True,
                        batch_wait_timeout_iters=3, batch_wait_max_tokens_ratio=1.0)
    assert rec.column("first_scheduled")[1] == pytest.approx(0.02)
    assert list(plans[2].prefill_new) == [16]


@pytest.mark.parametrize("timeout,ratio", [(0, 0.5), (3, 0.0)])
def test_one_value_alone_never_waits(timeout, ratio):
    # TensorRT-LLM enables batch waiting when either is above 0, but a zero timeout releases at
    # once and a zero ratio is always reached
    reqs = [req(0, 0.0, 10, 10), req(1, 0.015, 10, 3)]
    on, _, _ = run(reqs, batch_wait_timeout_iters=timeout, batch_wait_max_tokens_ratio=ratio)
    off, _, _ = run(reqs)
    for name in ("first_token", "last_token", "finish"):
        np.testing.assert_allclose(on.column(name), off.column(name))


def test_counter_keeps_its_count_without_generation_work():
    # r1 is held twice (counter 2); r0 then finishes, so the next iteration has r1's context
    # alone (no generation: it runs, the counter is left alone at 2).  r2 arrives later and
    # is held once (counter 3) before the timeout releases it.
    reqs = [req(0, 0.0, 10, 4), req(1, 0.015, 10, 5), req(2, 0.062, 10, 3)]
    rec, eng, _ = run(reqs, batch_wait_timeout_iters=3, batch_wait_max_tokens_ratio=0.5)
    # r0's tokens come at 0.01 (context), 0.02, 0.03, 0.04 (finished); r1 is held at 0.02 and 0.03
    # and runs alone at 0.04; r1 decodes from 0.05 to 0.09, so r2 is held at 0.07 (counter 3)
    first = rec.column("first_scheduled").tolist()
    assert first == pytest.approx([0.0, 0.04, 0.08])
    assert rec.column("finish").tolist() == pytest.approx([0.04, 0.09, 0.11])
    assert eng.batch_wait_count == 0


def _random_case(seed: int):
    rng = random.Random(seed)
    tpb = rng.choice([4, 16, 32])
    reqs = random_block_workload(rng, 70, max_in=250, max_out=120)
    for j, r in enumerate(reqs):
        r.arrival = 0.05 * j + r.arrival
    opt = TRTLLMOptions(tokens_per_block=tpb, max_num_tokens=256, max_batch_size=rng.choice([8, 16, 64]),
                        capacity_scheduler_policy=rng.choice(["GUARANTEED_NO_EVICT", "GUARANTEED_NO_EVICT",
                                                              "MAX_UTILIZATION"]),
                        enable_chunked_context=rng.random() < 0.5, enable_block_reuse=rng.random() < 0.4,
                        batch_wait_timeout_iters=rng.choice([1, 5, 20, 40]),
                        batch_wait_max_tokens_ratio=rng.choice([0.3, 0.8, 0.9]))
    return reqs, opt, tpb * rng.randint(40, 400)


def _simulate(reqs, opt, kv, fast):
    rec = RequestRecorder()
    eng = TRTLLMEngine(0, rec, EngineLimits(kv_capacity_tokens=kv, context_length=4096), opt)
    st = LinearStepTime(base_s=0.01, per_prefill_token_s=1e-5, per_decode_request_s=1e-4, per_context_token_s=1e-7)
    worker = Worker(0, eng, st, 1, fast_forward=fast)
    Simulation(iter(copy.deepcopy(reqs)), "open", None, [worker], RoundRobinRouter(), rec).run()
    return rec, eng, worker


@pytest.mark.parametrize("seed", range(8))
def test_fast_forward_equals_step_mode(seed):
    reqs, opt, kv = _random_case(seed)
    a, ea, wa = _simulate(reqs, opt, kv, fast=False)
    b, eb, wb = _simulate(reqs, opt, kv, fast=True)
    for name in ("first_scheduled", "first_token", "second_token", "last_token", "finish"):
        np.testing.assert_allclose(a.column(name), b.column(name), rtol=1e-9, equal_nan=True, err_msg=name)
    for name in ("generated", "retractions", "cached_tokens", "status"):
        assert a.column(name).tolist() == b.column(name).tolist(), name
    assert wa.passes == wb.passes and ea.batch_wait_count == eb.batch_wait_count
    # every request ends in exactly one terminal state
    status = b.column("status")[:b.size]
    assert ((status == Status.COMPLETED) | (status == Status.REJECTED)).all() and b.size == len(reqs)
    eb.check_invariants()


def test_fast_forward_skips_held_passes_and_waiting_changes_the_schedule():
    rng = random.Random(5)
    reqs = random_block_workload(rng, 60, max_in=250, max_out=200)
    for j, r in enumerate(reqs):
        r.arrival = 0.2 * j + r.arrival
    opt = TRTLLMOptions(tokens_per_block=16, max_num_tokens=2048, enable_block_reuse=False,
                        batch_wait_timeout_iters=20, batch_wait_max_tokens_ratio=0.9)
    a, _, wa = _simulate(reqs, opt, 64_000, fast=False)
    b, _, wb = _simulate(reqs, opt, 64_000, fast=True)
    np.testing.assert_allclose(a.column("first_token"), b.column("first_token"), rtol=1e-9)
    assert wa.passes == wb.passes
    off, _, _ = _simulate(reqs, opt.model_copy(update={"batch_wait_timeout_iters": 0,
                                                         "batch_wait_max_tokens_ratio": 0.0}), 64_000, fast=True)
    ttft_on = np.nanmean(b.column("first_token") - b.column("arrival"))
    ttft_off = np.nanmean(off.column("first_token") - off.column("arrival"))
    assert ttft_on > ttft_off


def test_no_batch_waiting_with_attention_dp():
    # the executor applies batch waiting only without attention DP
    reqs = random_requests(4, n=50)
    st = FixedStepTime(0.01)
    plain = simulate_dp(lambda r: dp_engine("trtllm", r, kv=12_000), copy.deepcopy(reqs), st, fast=False)[0]
    waited, eng, _ = simulate_dp(lambda r: dp_engine("trtllm", r, kv=12_000, batch_wait_timeout_iters=40,
                                                     batch_wait_max_tokens_ratio=0.9),
                                 copy.deepcopy(reqs), st, fast=False)
    assert not any(e.batch_wait for e in eng.ranks)
    for name in ("first_scheduled", "first_token", "finish"):
        np.testing.assert_allclose(plain.column(name), waited.column(name), equal_nan=True)
