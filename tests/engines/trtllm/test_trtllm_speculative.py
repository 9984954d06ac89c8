"""TensorRT-LLM speculative decoding (MTP / EAGLE one-model): budget, KV rewind, TPOT."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from servesim.api import predict
from servesim.cluster.routers import RoundRobinRouter
from servesim.cluster.worker import Worker
from servesim.engines.base import EngineLimits
from servesim.engines.speculative import SpecDecoder, SpeculativeConfig
from servesim.engines.trtllm.scheduler import TRTLLMEngine
from servesim.engines.trtllm.options import TRTLLMOptions
from servesim.metrics.recorder import RequestRecorder, Status
from servesim.perf.simple import FixedStepTime
from servesim.sim.simulation import Simulation
from tests.simharness import make_request


def engine(rec, rate: float, k: int = 2, kv: int = 4096, **opts) -> TRTLLMEngine:
    opts.setdefault("tokens_per_block", 4)
    eng = TRTLLMEngine(0, rec, EngineLimits(kv_capacity_tokens=kv, context_length=4096), TRTLLMOptions(**opts))
    eng.spec = SpecDecoder(SpeculativeConfig(method="mtp", draft_tokens=k, acceptance_rate=rate), 0, 0)
    return eng


def run(reqs, make):
    rec = RequestRecorder()
    eng = make(rec)
    Simulation(iter(reqs), "open", None, [Worker(0, eng, FixedStepTime(0.01), 1, fast_forward=True)],
               RoundRobinRouter(), rec).run()
    return rec, eng


def test_all_drafts_accepted_three_tokens_per_step():
    # k = 2 drafts, all accepted: every generation step keeps 3 tokens (never past max_new)
    reqs = [make_request(0, 0.0, 10, 7), make_request(1, 0.0, 6, 4)]
    rec, _ = run(reqs, lambda r: engine(r, 1.0, max_num_tokens=16))
    assert rec.column("first_token")[:2].tolist() == pytest.approx([0.01, 0.01])
    # r1: 1 + 3 = 4 tokens after pass 2; r0: 1 + 3 + 3 = 7 after pass 3
    assert rec.column("finish")[:2].tolist() == pytest.approx([0.03, 0.02])
    assert rec.column("generated")[:2].tolist() == [7, 4]


def test_verification_tokens_count_against_max_num_tokens():
    # budget 5: a generation step costs 1 + 2 = 3 tokens, so r1's 4-token context no longer
    # fits beside r0's step (without speculation 1 + 4 = 5 would)
    reqs = [make_request(0, 0.0, 4, 4), make_request(1, 0.0, 4, 2)]
    rec, _ = run(reqs, lambda r: engine(r, 1.0, max_num_tokens=5))
    assert rec.column("first_token")[:2].tolist() == pytest.approx([0.01, 0.03])
    assert rec.column("finish")[:2].tolist() == pytest.approx([0.02, 0.04])
    plain, _ = run(reqs, lambda r: TRTLLMEngine(0, r, EngineLimits(kv_capacity_tokens=4096, context_length=4096),
                                                TRTLLMOptions(tokens_per_block=4, max_num_tokens=5)))
    assert plain.column("first_token")[1] == pytest.approx(0.02)


@pytest.mark.parametrize("policy", ["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"])
@pytest.mark.parametrize("rate", [0.0, 0.6])
def test_rejected_drafts_are_rewound_and_kv_is_conserved(policy, rate):
    rec = RequestRecorder()
    eng = engine(rec, rate, k=3, kv=1200, capacity_scheduler_policy=policy, max_num_tokens=512)
    rng = np.random.default_rng(4)
    reqs = [make_request(i, 0.0, int(rng.integers(20, 300)), int(rng.integers(1, 120)), block_size=64)
            for i in range(30)]
    for r in reqs:
        rec.register(r.index, r.request_id, None, 0, r.input_length, r.output_length, False)
        eng.add_request(r, 0.0)
    t, saw_spec = 0.0, False
    while eng.has_work():
        plan = eng.schedule(t)
        assert plan is not None
        saw_spec |= plan.decode_tokens == 4
        t += 0.01
        eng.complete(plan, t)
        eng.check_invariants()  # generating requests hold exactly ceil(computed / block) blocks
    assert saw_spec
    assert np.all(rec.column("status")[:30] == Status.COMPLETED)
    np.testing.assert_array_equal(rec.column("generated")[:30], rec.column("output_length")[:30])
    assert eng.pool.num_used_blocks == 0


# -- behaviour: TPOT ------------------------------------------------------------------------------
BASE = {
    "seed": 0,
    "workload": {"kind": "synthetic", "num_requests": 150, "arrival": {"process": "poisson", "rate": 4.0},
                 "input": {"dist": "lognormal", "median": 1000, "sigma": 0.6, "max": 8000},
                 "output": {"dist": "lognormal", "median": 200, "sigma": 0.5, "max": 1000}},
    "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "workers": 1,
                   "engine": {"name": "trtllm"}},
    "output": {"dir": None},
}


def _tpot(spec: dict | None, mode: str = "fast") -> float:
    c = copy.deepcopy(BASE)
    if spec is not None:
        c["deployment"]["speculative"] = spec
    c["simulation"] = {"mode": mode}
    s = predict(c).summary
    assert s["requests"]["completed"] == 150
    return s["latency"]["tpot_ms"]["mean"]


def test_trtllm_speculation_tpot_low_acceptance_costs_high_acceptance_pays():
    base = _tpot(None)
    useless = _tpot({"method": "mtp", "draft_tokens": 3, "mean_accepted_length": 1.0})
    good = _tpot({"method": "eagle", "draft_tokens": 3, "mean_accepted_length": 3.2})
    assert useless > base  # verifying 4 tokens and drafting 3 for one kept token
    assert good < 0.6 * base
    # speculation turns fast-forward off: both modes give the same run
    assert _tpot({"method": "mtp", "draft_tokens": 2, "mean_accepted_length": 2.0}, "step") == pytest.approx(
        _tpot({"method": "mtp", "draft_tokens": 2, "mean_accepted_length": 2.0}), rel=1e-12)
