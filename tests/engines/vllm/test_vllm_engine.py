"""vLLM v1 engine model: hand-computed schedules under a fixed 10 ms pass."""

from __future__ import annotations

import math

import numpy as np
import pytest

from blockkv_harness import req, run_engine
from servesim.engines.vllm.scheduler import VLLMEngine
from servesim.engines.vllm.options import (
    VLLMOptions,
    default_max_num_batched_tokens,
    default_max_num_seqs,
    resolve_vllm_options,
)
from servesim.errors import ConfigError
from servesim.metrics.recorder import Status


def run(requests, kv_tokens=100_000, context=4096, fast=False, **opts):
    """The hand-computed timelines below are the synchronous loop's unless a test asks for async."""
    opts.setdefault("max_num_batched_tokens", 8192)
    opts.setdefault("max_num_seqs", 256)
    opts.setdefault("async_scheduling", False)
    return run_engine(VLLMEngine, VLLMOptions(**opts), requests, kv_tokens, context, fast)


def col(rec, name):
    return rec.column(name)


def test_defaults_follow_vllm_serve():
    assert default_max_num_batched_tokens(140.4, "h200_sxm") == 8192
    assert default_max_num_batched_tokens(80.0, "h100_sxm") == 8192
    assert default_max_num_batched_tokens(80.0, "a100_80gb") == 2048
    assert default_max_num_batched_tokens(48.0, "l40s") == 2048
    assert default_max_num_seqs(140.4, "h200_sxm") == 1024
    assert default_max_num_seqs(80.0, "a100_80gb") == 256
    o = resolve_vllm_options(VLLMOptions(), 140.4, "h200_sxm", 32768)
    assert (o.max_num_batched_tokens, o.max_num_seqs, o.max_model_len) == (8192, 1024, 32768)
    o = resolve_vllm_options(VLLMOptions(enable_chunked_prefill=False), 80.0, "a100_80gb", 32768)
    assert o.max_num_batched_tokens == 32768
    o = resolve_vllm_options(VLLMOptions(max_num_seqs=2, max_model_len=1000), 140.4, "h200", 32768)
    assert o.max_num_batched_tokens == 2000  # capped at max_num_seqs x max_model_len
    o = resolve_vllm_options(VLLMOptions(), None, None, 4096)
    assert (o.max_num_batched_tokens, o.max_num_seqs) == (2048, 128)
    with pytest.raises(Exception):
        VLLMOptions(bogus=1)


def test_single_request_timeline():
    rec, eng, plans = run([req(0, 0.0, 32, 4)])
    assert col(rec, "first_token")[0] == pytest.approx(0.01)
    assert col(rec, "last_token")[0] == pytest.approx(0.04)
    assert col(rec, "status")[0] == Status.COMPLETED
    assert list(plans[0].prefill_new) == [32] and plans[0].num_decode == 0
    assert [list(p.decode_ctx) for p in plans[1:]] == [[33], [34], [35]]


def test_mixed_pass_decode_and_prefill_chunks():
    # Budget 64.  A (32 in, 5 out) decodes while B (100 in) arrives at 15 ms:
    # pass 3 = A decode + B chunk 63, pass 4 = A decode + B chunk 37 (B's first token).
    rec, eng, plans = run([req(0, 0.0, 32, 5), req(1, 0.015, 100, 2)], max_num_batched_tokens=64)
    p3, p4 = plans[2], plans[3]
    assert list(p3.prefill_new) == [63] and list(p3.prefill_cached) == [0] and list(p3.decode_ctx) == [34]
    assert list(p4.prefill_new) == [37] and list(p4.prefill_cached) == [63] and list(p4.decode_ctx) == [35]
    ft, lt = col(rec, "first_token"), col(rec, "last_token")
    assert ft[0] == pytest.approx(0.01) and lt[0] == pytest.approx(0.05)
    assert ft[1] == pytest.approx(0.04) and lt[1] == pytest.approx(0.05)
    assert ft[1] - col(rec, "arrival")[1] == pytest.approx(0.025)  # TTFT
    assert col(rec, "second_token")[1] == pytest.approx(0.05)


def test_chunk_count_with_budget():
    rec, eng, plans = run([req(0, 0.0, 200, 2)], max_num_batched_tokens=64)
    assert [int(p.prefill_new[0]) for p in plans[:4]] == [64, 64, 64, 8]
    assert [int(p.prefill_cached[0]) for p in plans[:4]] == [0, 64, 128, 192]
    assert col(rec, "first_token")[0] == pytest.approx(0.04)
    assert col(rec, "last_token")[0] == pytest.approx(0.05)


def test_long_prefill_threshold_caps_chunks():
    rec, eng, plans = run([req(0, 0.0, 100, 1)], long_prefill_token_threshold=40)
    assert [int(p.prefill_new[0]) for p in plans] == [40, 40, 20]


def test_several_prompts_admitted_in_one_pass():
    rec, eng, plans = run([req(0, 0.0, 30, 1), req(1, 0.0, 30, 1), req(2, 0.0, 30, 1)],
                          max_num_batched_tokens=64)
    # FCFS: 30 + 30 + a 4-token chunk of the third prompt.
    assert list(plans[0].prefill_new) == [30, 30, 4]
    assert list(plans[1].prefill_new) == [26] and list(plans[1].prefill_cached) == [4]


def test_prefix_cache_hit_full_blocks_minus_last_token():
    ids = (1, 2, 3, 4)
    reqs = [
        req(0, 0.0, 64, 2, ids),
        req(1, 1.0, 64, 2, ids),            # fully cached: recomputes its last block -> 48
        req(2, 2.0, 70, 2, ids + (5,)),     # 4 full blocks cached, 6 new tokens -> 64
        req(3, 3.0, 40, 2, (9, 2, 3)),      # different first block -> 0
        req(4, 4.0, 40, 2, (1, 2, 7)),      # 2 blocks -> 32
    ]
    rec, eng, plans = run(reqs)
    assert col(rec, "cached_tokens").tolist() == [0, 48, 64, 0, 32]
    assert eng.prompt_tokens == 64 + 64 + 70 + 40 + 40
    assert eng.cached_prompt_tokens == 48 + 64 + 32
    assert [int(p.prefill_cached[0]) for p in plans if p.prefill_new.size] == [0, 48, 64, 0, 32]
    assert [int(p.prefill_new[0]) for p in plans if p.prefill_new.size] == [64, 16, 6, 40, 8]


def test_prefix_caching_off():
    ids = (1, 2, 3, 4)
    rec, eng, _ = run([req(0, 0.0, 64, 2, ids), req(1, 1.0, 64, 2, ids)], enable_prefix_caching=False)
    assert col(rec, "cached_tokens").tolist() == [0, 0]


def test_preemption_under_tiny_kv():
    # 10 usable blocks of 16 (the null block is reserved); each request grows to 4 blocks.
    reqs = [req(i, 0.0, 20, 40) for i in range(6)]
    rec, eng, _ = run(reqs, kv_tokens=11 * 16)
    assert eng.num_blocks == 10
    assert (col(rec, "status") == Status.COMPLETED).all()
    assert (col(rec, "generated") == 40).all()
    assert col(rec, "retractions").sum() > 0
    assert eng.retractions == col(rec, "retractions").sum()
    # The oldest request is never the victim.
    assert col(rec, "retractions")[0] == 0
    eng.check_invariants()
    assert eng.pool.num_used_blocks == 0


def test_preempted_request_goes_to_the_front():
    # Two blocks of 16 usable; A (16 in) and B (8 in) both admitted, A then needs a second
    # block while B holds one: no block left -> B (last) is preempted, then resumes.
    reqs = [req(0, 0.0, 16, 10), req(1, 0.0, 8, 3)]
    rec, eng, plans = run(reqs, kv_tokens=3 * 16)
    assert col(rec, "retractions").tolist() == [0, 1]
    assert (col(rec, "status") == Status.COMPLETED).all()
    # B's prompt and its generated token are recomputed when it resumes.
    assert any(p.prefill_new.size and int(p.prefill_new[0]) == 9 for p in plans)


def test_seat_limit():
    rec, eng, _ = run([req(0, 0.0, 10, 3), req(1, 0.0, 10, 3)], max_num_seqs=1)
    ft = col(rec, "first_token")
    assert ft[0] == pytest.approx(0.01)
    assert ft[1] == pytest.approx(0.04)  # admitted in the pass after A's third token


def test_chunked_prefill_off_waits_for_budget():
    rec, eng, plans = run([req(0, 0.0, 40, 3), req(1, 0.0, 40, 2)], max_num_batched_tokens=64,
                          max_model_len=64, enable_chunked_prefill=False)
    assert list(plans[0].prefill_new) == [40]
    assert list(plans[1].prefill_new) == [40] and list(plans[1].decode_ctx) == [41]
    assert col(rec, "first_token")[1] == pytest.approx(0.02)
    with pytest.raises(ConfigError):
        run([req(0, 0.0, 10, 1)], max_num_batched_tokens=32, max_model_len=64, enable_chunked_prefill=False)


def test_max_model_len_rejects_and_cuts():
    rec, eng, _ = run([req(0, 0.0, 100, 5), req(1, 0.0, 97, 10), req(2, 0.0, 10, 5)], max_model_len=100)
    st = col(rec, "status")
    assert st[0] == Status.REJECTED and "max_model_len" in rec.reason[0]
    assert st[1] == Status.COMPLETED and col(rec, "generated")[1] == 3 and "cut" in rec.reason[1]
    assert st[2] == Status.COMPLETED and col(rec, "generated")[2] == 5
    assert math.isnan(col(rec, "first_token")[0])


def test_prompt_larger_than_kv_is_rejected():
    rec, eng, _ = run([req(0, 0.0, 200, 5), req(1, 0.0, 10, 2)], kv_tokens=5 * 16)
    assert col(rec, "status").tolist() == [Status.REJECTED, Status.COMPLETED]
    assert "KV cache" in rec.reason[0]


def test_fast_forward_stretch_used_and_equal():
    reqs = [req(i, 0.0, 20 + i, 50 + 7 * i) for i in range(5)]
    a, _, plans_step = run(reqs, kv_tokens=40 * 16, fast=False)
    b, _, plans_fast = run(reqs, kv_tokens=40 * 16, fast=True)
    assert len(plans_fast) < len(plans_step)
    for name in ("first_token", "last_token", "finish", "second_token"):
        np.testing.assert_allclose(a.column(name), b.column(name), rtol=1e-9)
    assert a.column("generated").tolist() == b.column("generated").tolist()


def test_request_states_compare_by_identity() -> None:
    """The engines remove finished requests through a set of their states: two requests with
    equal fields must stay distinct, so the state classes keep object's equality and hash."""
    from servesim.engines.trtllm.scheduler import TReq
    from servesim.engines.vllm.fast_path import VReq

    for cls in (VReq, TReq):
        assert cls.__eq__ is object.__eq__ and cls.__hash__ is object.__hash__, cls


def test_async_scheduling_admits_an_arrival_one_pass_later():
    """vLLM's async scheduling chooses pass k + 1 when pass k starts: a request arriving while
    pass k runs is prefilled in pass k + 2 (one 10 ms pass later than the normal loop), one that
    finds the engine idle at once, and a request's own decodes are unchanged."""
    reqs = [req(0, 0.0, 32, 6), req(1, 0.015, 32, 3)]  # request 1 arrives inside pass 2 (10-20 ms)
    sync, _, _ = run(reqs)
    asyn, eng, _ = run(reqs, async_scheduling=True)
    assert col(sync, "first_token").tolist() == pytest.approx([0.01, 0.03])  # prefilled in pass 3
    assert col(asyn, "first_token").tolist() == pytest.approx([0.01, 0.04])  # pass 4: pass 3 was chosen at 10 ms
    assert col(asyn, "last_token")[0] == pytest.approx(col(sync, "last_token")[0])
    assert eng.input_lag_passes() == 1
    idle, _, _ = run([req(0, 0.0, 32, 2), req(1, 0.5, 32, 2)], async_scheduling=True)
    assert col(idle, "first_token")[1] == pytest.approx(0.51)  # the engine was idle: no lag

