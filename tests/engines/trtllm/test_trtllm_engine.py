"""TensorRT-LLM engine model: hand-computed schedules under a fixed 10 ms pass."""

from __future__ import annotations

import numpy as np
import pytest

from blockkv_harness import req, run_engine
from servesim.engines.trtllm.scheduler import TRTLLMEngine
from servesim.engines.trtllm.options import TRTLLMOptions
from servesim.errors import ConfigError
from servesim.metrics.recorder import Status


def run(requests, kv_tokens=100_000, context=4096, fast=False, **opts):
    opts.setdefault("tokens_per_block", 16)
    return run_engine(TRTLLMEngine, TRTLLMOptions(**opts), requests, kv_tokens, context, fast)


def test_defaults():
    o = TRTLLMOptions()
    assert (o.max_batch_size, o.max_num_tokens, o.tokens_per_block) == (2048, 8192, 32)
    assert o.capacity_scheduler_policy == "GUARANTEED_NO_EVICT"
    assert o.enable_chunked_context is False and o.enable_block_reuse is True
    assert o.free_gpu_memory_fraction == 0.9
    with pytest.raises(Exception):
        TRTLLMOptions(name="trtllm", bogus=True)


def test_mixed_iteration_with_chunked_context():
    # max_num_tokens 64: A generates while B's 100-token context is chunked from the 63
    # tokens left, rounded down to whole blocks (48), then the remaining 52.
    rec, eng, plans = run([req(0, 0.0, 32, 5), req(1, 0.015, 100, 2)], max_num_tokens=64,
                          enable_chunked_context=True)
    p3, p4 = plans[2], plans[3]
    assert list(p3.prefill_new) == [48] and list(p3.prefill_cached) == [0] and list(p3.decode_ctx) == [34]
    assert list(p4.prefill_new) == [52] and list(p4.prefill_cached) == [48] and list(p4.decode_ctx) == [35]
    ft, lt = rec.column("first_token"), rec.column("last_token")
    assert ft[0] == pytest.approx(0.01) and lt[0] == pytest.approx(0.05)
    assert ft[1] == pytest.approx(0.04) and lt[1] == pytest.approx(0.05)


def test_chunked_context_chunks():
    rec, eng, plans = run([req(0, 0.0, 200, 2)], max_num_tokens=70, enable_chunked_context=True)
    assert [int(p.prefill_new[0]) for p in plans[:3]] == [64, 64, 64]
    assert [int(p.prefill_new[0]) for p in plans[3:4]] == [8]
    assert rec.column("first_token")[0] == pytest.approx(0.04)


def test_context_without_chunking_waits_for_token_budget():
    # 64-token budget, no chunking: A (40) runs alone; B (40) shares the next iteration
    # with A's generation step (41 tokens).
    rec, eng, plans = run([req(0, 0.0, 40, 3), req(1, 0.0, 40, 2)], max_num_tokens=64)
    assert list(plans[0].prefill_new) == [40] and plans[0].num_decode == 0
    assert list(plans[1].prefill_new) == [40] and list(plans[1].decode_ctx) == [41]
    assert rec.column("first_token")[1] == pytest.approx(0.02)


def test_prompt_above_max_num_tokens_rejected_without_chunking():
    rec, eng, _ = run([req(0, 0.0, 100, 2), req(1, 0.0, 10, 2), req(2, 0.0, 90, 2)], max_num_tokens=64)
    assert rec.column("status").tolist() == [Status.REJECTED, Status.COMPLETED, Status.REJECTED]
    assert "max_num_tokens" in rec.reason[0]
    # one reason per cause, whatever the prompt's length, so summaries can count them
    assert rec.reason[0] == rec.reason[2]


def test_guaranteed_no_evict_reserves_whole_request():
    # 8 blocks of 16.  A reserves ceil((32+64)/16) = 6 blocks; B would need 4 > 2 left, so
    # it waits until A finishes at 0.64 s and gets its first token one pass later.
    reqs = [req(0, 0.0, 32, 64), req(1, 0.0, 32, 32)]
    for fast in (False, True):
        rec, eng, _ = run(reqs, kv_tokens=8 * 16, fast=fast)
        ft, lt = rec.column("first_token"), rec.column("last_token")
        assert lt[0] == pytest.approx(0.64)
        assert ft[1] == pytest.approx(0.65)
        assert rec.column("retractions").sum() == 0
        assert (rec.column("status") == Status.COMPLETED).all()


def test_no_evict_admits_both_when_reservations_fit():
    reqs = [req(0, 0.0, 32, 16), req(1, 0.0, 32, 16)]  # 3 blocks each, 8 available
    rec, eng, plans = run(reqs, kv_tokens=8 * 16)
    assert list(plans[0].prefill_new) == [32, 32]
    assert rec.column("first_token").tolist() == pytest.approx([0.01, 0.01])


def test_max_utilization_pauses_latest_started_request():
    reqs = [req(0, 0.0, 32, 64), req(1, 0.0, 32, 64)]
    for fast in (False, True):
        rec, eng, plans = run(reqs, kv_tokens=8 * 16, capacity_scheduler_policy="MAX_UTILIZATION", fast=fast)
        assert list(plans[0].prefill_new) == [32, 32]  # both admitted greedily
        r = rec.column("retractions")
        assert r[0] == 0 and r[1] >= 1
        assert (rec.column("status") == Status.COMPLETED).all()
        assert (rec.column("generated") == 64).all()
        # A never waits: 64 tokens in 64 consecutive passes.
        assert rec.column("last_token")[0] == pytest.approx(0.64)
        eng.check_invariants()


def test_block_reuse_of_repeated_prompt():
    ids = (1, 2, 3, 4)
    reqs = [req(0, 0.0, 64, 2, ids), req(1, 1.0, 64, 2, ids), req(2, 2.0, 70, 2, ids + (5,)),
            req(3, 3.0, 64, 2, (9, 2, 3, 4))]
    rec, eng, plans = run(reqs)
    assert rec.column("cached_tokens").tolist() == [0, 48, 64, 0]
    assert [int(p.prefill_new[0]) for p in plans if p.prefill_new.size] == [64, 16, 6, 64]
    rec, eng, plans = run(reqs, enable_block_reuse=False)
    assert rec.column("cached_tokens").tolist() == [0, 0, 0, 0]


def test_max_seq_len_rejects_and_cuts():
    rec, eng, _ = run([req(0, 0.0, 100, 5), req(1, 0.0, 97, 10)], max_seq_len=100)
    assert rec.column("status").tolist() == [Status.REJECTED, Status.COMPLETED]
    assert "max_seq_len" in rec.reason[0]
    assert rec.column("generated")[1] == 3 and "cut" in rec.reason[1]


def test_chunk_budget_below_block_is_a_config_error():
    with pytest.raises(ConfigError):
        run([req(0, 0.0, 10, 1)], max_num_tokens=8, enable_chunked_context=True)


def test_max_batch_size():
    rec, eng, plans = run([req(i, 0.0, 10, 3) for i in range(3)], max_batch_size=2)
    assert list(plans[0].prefill_new) == [10, 10]
    assert rec.column("first_token")[2] == pytest.approx(0.04)


def test_stretch_equals_steps():
    reqs = [req(i, 0.0, 20 + i, 40 + 9 * i) for i in range(5)]
    a, _, ps = run(reqs, kv_tokens=60 * 16)
    b, _, pf = run(reqs, kv_tokens=60 * 16, fast=True)
    assert len(pf) < len(ps)
    for name in ("first_token", "second_token", "last_token", "finish"):
        np.testing.assert_allclose(a.column(name), b.column(name), rtol=1e-9)
