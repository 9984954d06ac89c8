"""Speculative decoding: acceptance sampling, draft cost, engines and the TPOT behaviour."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from pydantic import ValidationError

from servesim.api import predict
from servesim.engines.base import EngineLimits
from servesim.engines.sglang.scheduler import SGLangEngine
from servesim.engines.sglang.options import SGLangOptions
from servesim.engines.speculative import (SpecDecoder, SpeculativeConfig, SpeculativeStepTime, expected_length,
                                          rate_for_mean_length)
from servesim.engines.vllm.scheduler import VLLMEngine
from servesim.engines.vllm.options import VLLMOptions
from servesim.metrics.recorder import RequestRecorder, Status
from servesim.perf.plan import PassPlan
from servesim.perf.simple import FixedStepTime

from tests.simharness import make_request


# -- acceptance -------------------------------------------------------------------------------
def test_rate_solves_the_mean_length():
    for k in (1, 3, 5):
        for m in (1.0, 1.5, 2.0, k + 1.0):
            if m > k + 1:
                continue
            p = rate_for_mean_length(m, k)
            assert expected_length(np.full(k, p)) == pytest.approx(m, abs=1e-9)


@pytest.mark.parametrize("spec", [
    {"method": "mtp", "draft_tokens": 3, "mean_accepted_length": 2.4},
    {"method": "eagle", "draft_tokens": 4, "acceptance_rates": [0.8, 0.7, 0.6, 0.5]},
    {"method": "ngram", "draft_tokens": 5, "acceptance_rate": 0.4},
])
def test_drawn_lengths_match_the_expected_mean(spec):
    cfg = SpeculativeConfig(**spec)
    dec = SpecDecoder(cfg, seed=7, worker_id=0)
    draws = dec.draw(200_000)
    assert draws.min() >= 1 and draws.max() <= cfg.draft_tokens + 1
    assert draws.mean() == pytest.approx(dec.mean_length, rel=0.01)


def test_draws_are_reproducible_per_seed_and_worker():
    cfg = SpeculativeConfig(draft_tokens=3, mean_accepted_length=2.0)
    a, b = SpecDecoder(cfg, 1, 0).draw(100), SpecDecoder(cfg, 1, 0).draw(100)
    c = SpecDecoder(cfg, 1, 1).draw(100)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_extremes():
    cfg1 = SpeculativeConfig(draft_tokens=3, mean_accepted_length=1.0)
    assert np.all(SpecDecoder(cfg1, 0, 0).draw(1000) == 1)
    cfg4 = SpeculativeConfig(draft_tokens=3, mean_accepted_length=4.0)
    assert np.all(SpecDecoder(cfg4, 0, 0).draw(1000) == 4)


@pytest.mark.parametrize("bad", [
    {"method": "mtp", "draft_tokens": 3},  # no acceptance
    {"draft_tokens": 3, "mean_accepted_length": 4.5},
    {"draft_tokens": 2, "acceptance_rates": [0.5]},
    {"draft_tokens": 2, "acceptance_rates": [0.5, 1.5]},
    {"draft_tokens": 2, "mean_accepted_length": 2.0, "acceptance_rate": 0.5},
    {"draft_tokens": 2, "mean_accepted_length": 2.0, "bogus": 1},
])
def test_bad_configs_are_refused(bad):
    with pytest.raises(ValidationError):
        SpeculativeConfig(**bad)


def test_ngram_defaults_to_a_fixed_rate_and_free_drafts():
    cfg = SpeculativeConfig(method="ngram", draft_tokens=4)
    assert cfg.cost_ratio == 0.0
    assert np.allclose(cfg.rates(), cfg.rates()[0])


# -- pricing ------------------------------------------------------------------------------------
def test_draft_cost_is_k_times_ratio_times_a_plain_decode():
    inner = FixedStepTime(0.01)
    st = SpeculativeStepTime(inner, SpeculativeConfig(draft_tokens=3, mean_accepted_length=2.0, draft_cost_ratio=0.1))
    ctx = np.array([100, 200])
    plain = inner.pass_time(PassPlan(decode_ctx=ctx))
    spec = PassPlan(decode_ctx=ctx, decode_tokens=4)
    assert st.pass_time(spec) == pytest.approx(inner.pass_time(spec) + 3 * 0.1 * plain)
    assert st.pass_time(PassPlan(decode_ctx=ctx)) == pytest.approx(plain)  # no speculation: no draft


# -- engines --------------------------------------------------------------------------------------
def _engine(which: str, rec):
    lim = EngineLimits(kv_capacity_tokens=1 << 15, context_length=32768)
    if which == "sglang":
        return SGLangEngine(0, rec, lim, SGLangOptions(page_size=16), 8192)
    return VLLMEngine(0, rec, lim, VLLMOptions(name="vllm", max_num_batched_tokens=4096, max_num_seqs=32))


@pytest.mark.parametrize("which", ["sglang", "vllm"])
def test_engine_keeps_kv_accounts_under_speculation(which):
    rec = RequestRecorder()
    eng = _engine(which, rec)
    eng.spec = SpecDecoder(SpeculativeConfig(draft_tokens=3, mean_accepted_length=2.5), 0, 0)
    rng = np.random.default_rng(3)
    reqs = [make_request(i, 0.0, int(rng.integers(50, 3000)), int(rng.integers(1, 300)), block_size=64)
            for i in range(40)]
    for r in reqs:
        rec.register(r.index, r.request_id, None, 0, r.input_length, r.output_length, False)
        eng.add_request(r, 0.0)
    t = 0.0
    saw_spec = False
    while eng.has_work():
        plan = eng.schedule(t)
        assert plan is not None
        saw_spec |= plan.decode_tokens == 4
        t += 0.01
        eng.complete(plan, t)
        eng.check_invariants()
    assert saw_spec
    st = rec.column("status")
    assert np.all(st == Status.COMPLETED)
    np.testing.assert_array_equal(rec.column("generated"), rec.column("output_length"))


# -- behaviour: TPOT ------------------------------------------------------------------------------
BASE = {
    "seed": 0,
    "workload": {"kind": "synthetic", "num_requests": 150, "arrival": {"process": "poisson", "rate": 4.0},
                 "input": {"dist": "lognormal", "median": 1000, "sigma": 0.6, "max": 8000},
                 "output": {"dist": "lognormal", "median": 200, "sigma": 0.5, "max": 1000}},
    "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "workers": 1},
    "output": {"dir": None},
}


def _cfg(engine: str, spec: dict | None, mode: str = "fast") -> dict:
    c = copy.deepcopy(BASE)
    c["deployment"]["engine"] = {"name": engine}
    if spec is not None:
        c["deployment"]["speculative"] = spec
    c["simulation"] = {"mode": mode}
    return c


def _tpot(c: dict) -> float:
    s = predict(c).summary
    assert s["requests"]["completed"] == 150
    return s["latency"]["tpot_ms"]["mean"]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_speculation_tpot_low_acceptance_costs_high_acceptance_pays(engine):
    base = _tpot(_cfg(engine, None))
    useless = _tpot(_cfg(engine, {"method": "mtp", "draft_tokens": 3, "mean_accepted_length": 1.0}))
    good = _tpot(_cfg(engine, {"method": "eagle", "draft_tokens": 3, "mean_accepted_length": 3.2}))
    assert useless > base  # verifying 4 tokens and drafting 3 for one kept token
    assert good < 0.6 * base


def test_ngram_lookup_with_fixed_acceptance_runs():
    base = _tpot(_cfg("sglang", None))
    ngram = _tpot(_cfg("sglang", {"method": "ngram", "draft_tokens": 4, "acceptance_rate": 0.6}))
    assert ngram < base


def test_speculative_run_is_reproducible():
    c = _cfg("sglang", {"method": "mtp", "draft_tokens": 2, "mean_accepted_length": 2.0})
    a, b = predict(c), predict(c)
    np.testing.assert_array_equal(a.recorder.column("last_token"), b.recorder.column("last_token"))


def test_speculative_decode_pool_in_a_disaggregated_run():
    c = _cfg("sglang", {"method": "mtp", "draft_tokens": 3, "mean_accepted_length": 3.0})
    c["deployment"]["disaggregation"] = {"prefill": {"workers": 1}, "decode": {"workers": 1}}
    spec_tpot = _tpot(c)
    del c["deployment"]["speculative"]
    assert spec_tpot < _tpot(c)


def _sglang_max_running(spec: dict | None, **engine) -> int:
    c = _cfg("sglang", spec)
    c["deployment"]["engine"].update(engine)
    c["workload"]["num_requests"] = 5
    return predict(c).to_json()["deployment_resolved"]["engine_settings"]["max_running_requests"]


def test_sglang_caps_running_requests_at_48_when_speculating_unless_told():
    """SGLang 0.5.9/0.5.10 (server_args._handle_speculative_decoding) resets an unset
    --max-running-requests to 48 for every speculative algorithm; a given value stands."""
    spec = {"method": "eagle", "draft_tokens": 2, "mean_accepted_length": 2.0}
    assert _sglang_max_running(None) > 48
    assert _sglang_max_running(spec) == 48
    assert _sglang_max_running(spec, max_running_requests=200) == 200
    assert _sglang_max_running({"method": "ngram", "draft_tokens": 4}) == 48


def test_sglangs_speculative_cap_is_split_over_attention_dp_ranks():
    c = _cfg("sglang", {"method": "eagle", "draft_tokens": 2, "mean_accepted_length": 2.0})
    c["workload"]["num_requests"] = 5
    c["deployment"].update({"model": "deepseek-ai/DeepSeek-V3", "gpu": "b200_sxm", "tp": 4, "attention_dp": 2,
                            "weight_dtype": "fp4"})
    assert predict(c).to_json()["deployment_resolved"]["engine_settings"]["max_running_requests"] == 24
