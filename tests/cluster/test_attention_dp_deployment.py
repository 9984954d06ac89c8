"""Attention DP in deployments: one engine per rank with per-rank KV and budgets; disaggregation."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from servesim.api import predict
from servesim.cluster.deployment import build_deployment
from servesim.config.load import load_config
from servesim.engines.attention_dp import RANK_COLUMN, AttentionDPEngine
from servesim.engines.sglang.planner import default_chunked_prefill_size
from servesim.metrics.recorder import RequestRecorder, Status

DP = 8
BASE = {
    "seed": 3,
    "workload": {"kind": "synthetic", "num_requests": 160, "arrival": {"process": "poisson", "rate": 30.0},
                 "input": {"dist": "lognormal", "median": 1200, "sigma": 0.8, "max": 8000},
                 "output": {"dist": "lognormal", "median": 80, "sigma": 0.7, "max": 500}},
    "deployment": {"model": "deepseek-ai/DeepSeek-V3", "gpu": "h200", "engine": {"name": "sglang"},
                   "tp": 1, "ep": DP, "attention_dp": DP, "weight_dtype": "fp8", "kv_dtype": "fp8"},
    "output": {"dir": None},
}


def _cfg(engine: str, **deployment) -> dict:
    c = copy.deepcopy(BASE)
    c["deployment"]["engine"] = {"name": engine}
    c["deployment"].update(deployment)
    return c


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
def test_each_rank_has_one_ranks_kv_and_budgets(engine):
    dep = build_deployment(load_config(_cfg(engine)))
    eng = dep.engine_factory(0, RequestRecorder())
    assert isinstance(eng, AttentionDPEngine) and len(eng.ranks) == DP
    kv = dep.memory.kv_tokens
    assert dep.kv_capacity_tokens == kv * DP
    s = dep.engine_settings
    for rank in eng.ranks:
        assert rank.limits.kv_capacity_tokens == kv
        if engine == "sglang":
            # SGLang splits chunked_prefill_size over the DP ranks and scales conservativeness by 0.3
            assert rank.chunk_size == default_chunked_prefill_size(dep.gpu.memory_bytes / 2**30) // DP
            assert rank.init_ratio == pytest.approx(0.7 * 0.3)
            assert rank.opt.max_prefill_tokens == 16384 == s["max_prefill_tokens"]
        elif engine == "vllm":
            assert (rank.max_seqs, rank.budget) == (s["max_num_seqs"], s["max_num_batched_tokens"])
        else:
            assert (rank.max_batch, rank.max_tokens) == (s["max_batch_size"], s["max_num_tokens"])
    assert eng.snapshot().kv_capacity_tokens == sum(r.capacity for r in eng.ranks)


def test_sglang_max_running_requests_is_a_total():
    cfg = _cfg("sglang")
    cfg["deployment"]["engine"]["max_running_requests"] = 256
    dep = build_deployment(load_config(cfg))
    eng = dep.engine_factory(0, RequestRecorder())
    assert [r.max_running for r in eng.ranks] == [256 // DP] * DP


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
@pytest.mark.parametrize("extra", [{}, {"workers": 2, "router": "least_loaded"}])
def test_predict_with_attention_dp_fast_equals_step(engine, extra):
    """Also with two workers under a load-aware router (settled mid-stretch) and the time series."""
    out = {}
    for mode in ("step", "fast"):
        cfg = _cfg(engine, **extra)
        cfg["simulation"] = {"mode": mode}
        cfg["output"] = {"dir": None, "timeseries": True, "timeseries_interval_s": 0.3}
        out[mode] = predict(cfg)
    for name, col in out["step"].timeseries.columns().items():
        np.testing.assert_allclose(out["fast"].timeseries.columns()[name], col, rtol=1e-9, err_msg=name)
    a, b = out["step"].recorder, out["fast"].recorder
    req = out["fast"].summary["requests"]
    assert req["completed"] + req["rejected"] == req["total"] == 160 and req["unfinished"] == 0
    for name in ("first_token", "last_token", "finish"):
        np.testing.assert_allclose(a.column(name), b.column(name), rtol=1e-9, equal_nan=True)
    ranks = b.extra(RANK_COLUMN, np.int64, -1)[:b.size]
    assert set(ranks.tolist()) == set(range(DP))  # every rank served requests


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
def test_disaggregated_decode_pool_with_attention_dp(engine):
    cfg = _cfg(engine, attention_dp=1, ep=1, tp=8)
    cfg["deployment"]["disaggregation"] = {"prefill": {"workers": 1},
                                           "decode": {"workers": 1, "tp": 1, "ep": DP, "attention_dp": DP}}
    p = predict(cfg)
    req = p.summary["requests"]
    assert req["completed"] + req["rejected"] == req["total"] == 160 and req["unfinished"] == 0
    rec = p.recorder
    done = (rec.column("status")[:rec.size] == Status.COMPLETED) & (rec.column("output_length")[:rec.size] > 1)
    ranks = rec.extra(RANK_COLUMN, np.int64, -1)[:rec.size]
    assert (ranks[done] >= 0).all() and len(set(ranks[done].tolist())) == DP
    assert np.all(rec.extra("decode_start_s")[:rec.size][done] >= rec.extra("transfer_end_s")[:rec.size][done])


def test_sglang_load_balance_method_selects_the_placement():
    from servesim.engines.attention_dp import RoundRobin, ShortestQueue

    cfg = _cfg("sglang")
    assert isinstance(build_deployment(load_config(cfg)).engine_factory(0, RequestRecorder()).placement, RoundRobin)
    cfg["deployment"]["engine"]["load_balance_method"] = "shortest_queue"
    eng = build_deployment(load_config(cfg)).engine_factory(0, RequestRecorder())
    assert isinstance(eng.placement, ShortestQueue)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_speculative_decoding_runs_on_every_rank(engine):
    base = predict(_cfg(engine)).summary
    cfg = _cfg(engine, speculative={"method": "mtp", "draft_tokens": 3, "mean_accepted_length": 3.0})
    p = predict(cfg)
    req = p.summary["requests"]
    assert req["completed"] + req["rejected"] == req["total"] == 160 and req["unfinished"] == 0
    # three tokens per decode pass on average (prefill passes are unchanged): faster per token
    assert p.summary["latency"]["tpot_ms"]["mean"] < 0.9 * base["latency"]["tpot_ms"]["mean"]
    # every rank drafts, with one sampler shared by the ranks (drawn in rank order)
    eng = build_deployment(load_config(cfg)).engine_factory(0, RequestRecorder())
    assert eng.spec is not None and all(r.spec is eng.spec for r in eng.ranks)
