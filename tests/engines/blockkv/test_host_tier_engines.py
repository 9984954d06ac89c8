"""The host KV tier in each engine: a prefix evicted from a tiny GPU cache is found on host,
loaded (the pass waits for, or overlaps with, the transfer), reported as host hits; KV
accounting holds under random workloads; fast-forward and reruns stay exact."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import servesim
from servesim.cluster.routers import RoundRobinRouter
from servesim.cluster.worker import Worker
from servesim.engines.base import EngineLimits
from servesim.engines.sglang.scheduler import SGLangEngine
from servesim.engines.sglang.options import SGLangOptions
from servesim.engines.trtllm.scheduler import TRTLLMEngine
from servesim.engines.trtllm.options import TRTLLMOptions
from servesim.engines.vllm.scheduler import VLLMEngine
from servesim.engines.vllm.options import VLLMOptions
from servesim.errors import ConfigError
from servesim.metrics.recorder import RequestRecorder, Status
from servesim.perf.simple import LinearStepTime
from servesim.sim.simulation import Simulation
from simharness import drive_by_hand, make_request, run

STEP = 0.01
BYTES = 1e5  # KV bytes per token (one GPU)
LINK = 1.0  # GB/s: 1,000 tokens take 0.1 s


def limits(capacity: int) -> EngineLimits:
    return EngineLimits(capacity, 131072, kv_bytes_per_token=BYTES)


def make_engine(kind: str, capacity: int, host_gb: float, overlap: bool | None = None, **extra):
    host = dict(host_kv_gb=host_gb, host_link_gbs=LINK, **extra)
    if overlap is not None:
        host["host_load_overlap"] = overlap

    def factory(wid, rec):
        if kind == "sglang":
            return SGLangEngine(wid, rec, limits(capacity), SGLangOptions(**host), 8192)
        if kind == "vllm":
            return VLLMEngine(wid, rec, limits(capacity),
                              VLLMOptions(max_num_batched_tokens=8192, max_num_seqs=16, **host))
        return TRTLLMEngine(wid, rec, limits(capacity), TRTLLMOptions(**host))

    return factory


# A, then B (different content) pushes A out of a GPU cache that holds one request; A again.
SCENARIO = [make_request(0, 0.0, 1500, 4, hash_ids=(7, 8, 9)), make_request(1, 1.0, 1500, 4, hash_ids=(1, 2, 3)),
            make_request(2, 2.0, 1500, 4, hash_ids=(7, 8, 9))]
# GPU capacity per engine: room for one request (vLLM: 100 usable blocks of 16 after the null block).
CAPACITY = {"sglang": 1600, "vllm": 1616, "trtllm": 1600}
# Hits of the repeated prompt: SGLang 1499 (page 1, one token recomputed); vLLM 93 blocks of 16
# (cap (1500 - 1) // 16); TensorRT-LLM 46 blocks of 32.
EXPECTED_HIT = {"sglang": 1499, "vllm": 93 * 16, "trtllm": 46 * 32}
ENGINES = ["sglang", "vllm", "trtllm"]


@pytest.mark.parametrize("kind", ENGINES)
def test_without_host_tier_the_evicted_prefix_is_recomputed(kind):
    rec, (w,) = run(make_engine(kind, CAPACITY[kind], 0.0), SCENARIO)
    assert rec.column("host_cached_tokens").tolist() == [0, 0, 0]
    assert rec.column("cached_tokens")[2] < 200  # at most the GPU blocks B did not recycle
    ttft = rec.column("first_token") - rec.column("arrival")
    np.testing.assert_allclose(ttft, STEP)
    assert w.engine.host is None


@pytest.mark.parametrize("kind", ENGINES)
@pytest.mark.parametrize("overlap", [False, True])
def test_prefix_evicted_to_host_is_loaded_back(kind, overlap):
    rec, (w,) = run(make_engine(kind, CAPACITY[kind], 1.0, overlap), SCENARIO)
    cached = rec.column("cached_tokens")
    host = rec.column("host_cached_tokens")
    assert host[:2].tolist() == [0, 0]
    assert cached[2] == EXPECTED_HIT[kind]
    assert 0 < host[2] <= cached[2]
    gpu_hits = cached[2] - host[2]
    assert gpu_hits < 200
    load = host[2] * BYTES / (LINK * 1e9)
    ttft = rec.column("first_token") - rec.column("arrival")
    # Fixed 10 ms passes: the pass waits for the load (10 ms + load) or hides compute
    # behind it (max(10 ms, load)).
    assert ttft[2] == pytest.approx(max(STEP, load) if overlap else STEP + load)
    assert ttft[:2].tolist() == pytest.approx([STEP, STEP])
    eng = w.engine
    eng.check_invariants()
    assert eng.host_loaded_tokens == host[2]
    assert eng.cached_prompt_tokens == cached.sum()


def test_engine_defaults_of_load_overlap():
    assert SGLangOptions().host_load_overlap is True  # HiCache: layer-wise load during compute
    assert VLLMOptions().host_load_overlap is False
    assert TRTLLMOptions().host_load_overlap is False
    assert SGLangOptions().host_kv_gb == VLLMOptions().host_kv_gb == TRTLLMOptions().host_kv_gb == 0


@pytest.mark.parametrize("kind", ENGINES)
def test_host_events_are_published_with_tier_host(kind):
    events = []
    rec = RequestRecorder()
    eng = make_engine(kind, CAPACITY[kind], 1.0)(0, rec)
    cache = eng.tree if kind == "sglang" else eng.pool
    cache.on_event = events.append  # what the deployment's publisher does
    Simulation(iter(SCENARIO), "open", None, [Worker(0, eng, LinearStepTime(STEP), 1, False)],
               RoundRobinRouter(), rec).run()
    host = [e for e in events if e.tier == "host"]
    assert host and {e.kind for e in host} >= {"stored"}
    held = sum(e.tokens if e.kind == "stored" else -e.tokens for e in host)
    assert held == (eng.host.size if kind == "sglang" else eng.host.size_tokens) > 0


@pytest.mark.parametrize("kind,opts,match", [
    ("sglang", {"disable_radix_cache": True}, "radix cache"),
    ("vllm", {"enable_prefix_caching": False}, "prefix caching"),
    ("trtllm", {"enable_block_reuse": False}, "block reuse"),
])
def test_host_tier_needs_the_prefix_cache(kind, opts, match):
    with pytest.raises(ConfigError, match=match):
        make_engine(kind, 2000, 1.0, **opts)(0, RequestRecorder())


# -- random workloads: invariants after every pass, exactly one terminal state ------------------

def random_requests(rng: random.Random, n: int, unit: int) -> list:
    t = 0.0
    out = []
    for i in range(n):
        t += rng.choice([0.0, rng.uniform(0, 0.3)])
        inp = rng.randint(1, 700)
        nb = -(-inp // unit)
        ids = [rng.randrange(3) if k < 3 else rng.randrange(40) for k in range(nb)]
        out.append(make_request(i, t, inp, rng.randint(1, 60), hash_ids=ids, block_size=unit))
    return out


def random_engine(rng: random.Random, kind: str, rec: RequestRecorder):
    host = dict(host_kv_gb=rng.choice([0.05, 0.2, 1.0]) * BYTES * 1000 / 1e9 * 10, host_link_gbs=LINK,
                host_load_overlap=rng.random() < 0.5)
    if kind == "sglang":
        opt = SGLangOptions(page_size=rng.choice([1, 16]), max_prefill_tokens=2048,
                            schedule_policy=rng.choice(["fcfs", "lpm"]), **host)
        return SGLangEngine(0, rec, limits(rng.randint(1000, 4000)), opt, rng.choice([None, 256, 1024]))
    if kind == "vllm":
        bs = rng.choice([1, 4, 16])
        opt = VLLMOptions(block_size=bs, max_num_batched_tokens=rng.randint(64, 512), max_num_seqs=rng.randint(1, 8),
                          long_prefill_token_threshold=rng.choice([0, 100]), max_model_len=800, **host)
        return VLLMEngine(0, rec, limits(bs * rng.randint(60, 200)), opt)
    bs = rng.choice([4, 16, 32])
    opt = TRTLLMOptions(tokens_per_block=bs, max_num_tokens=rng.randint(256, 1024), max_batch_size=rng.randint(1, 8),
                        enable_chunked_context=True, max_seq_len=800,
                        capacity_scheduler_policy=rng.choice(["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"]), **host)
    return TRTLLMEngine(0, rec, limits(bs * rng.randint(40, 120)), opt)


def _no_load_in_decode_passes(plan) -> None:
    assert plan.host_load_s == 0 or not plan.is_decode_only  # loads only in passes with prefill


def drive(eng, rec: RequestRecorder, reqs: list, rng: random.Random) -> None:
    drive_by_hand(eng, rec, reqs, rng, step=STEP, max_passes=50_000, on_plan=_no_load_in_decode_passes)
    host = rec.column("host_cached_tokens")
    assert (host <= rec.column("cached_tokens")).all() and (host >= 0).all()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 25), kind=st.sampled_from(ENGINES))
def test_random_workloads_keep_invariants_with_the_host_tier(seed, n, kind):
    rng = random.Random(seed)
    reqs = random_requests(rng, n, rng.choice([16, 64]))
    rec = RequestRecorder()
    eng = random_engine(rng, kind, rec)
    drive(eng, rec, reqs, rng)


# -- fast-forward and determinism ----------------------------------------------------------------

def simulate(kind: str, reqs: list, fast: bool, seed: int = 0) -> tuple[RequestRecorder, object]:
    rec = RequestRecorder()
    eng = random_engine(random.Random(seed), kind, rec)
    st_model = LinearStepTime(base_s=0.01, per_prefill_token_s=1e-5, per_decode_request_s=1e-4,
                              per_context_token_s=1e-7)
    Simulation(iter(reqs), "open", None, [Worker(0, eng, st_model, 1, fast_forward=fast)], RoundRobinRouter(),
               rec).run()
    return rec, eng


@pytest.mark.parametrize("kind", ENGINES)
def test_fast_forward_equals_step_mode_with_host_hits(kind):
    hits = 0
    for seed in range(4):
        reqs = random_requests(random.Random(100 + seed), 60, 16)
        a, ea = simulate(kind, reqs, fast=False, seed=seed)
        b, eb = simulate(kind, reqs, fast=True, seed=seed)
        for name in ("first_token", "last_token", "finish"):
            np.testing.assert_allclose(a.column(name), b.column(name), rtol=1e-9, err_msg=name)
        for name in ("generated", "retractions", "cached_tokens", "host_cached_tokens", "status"):
            assert a.column(name).tolist() == b.column(name).tolist(), name
        hits += int(a.column("host_cached_tokens").sum())
        c, _ = simulate(kind, reqs, fast=True, seed=seed)  # a rerun is identical
        for name in ("first_token", "last_token", "cached_tokens", "host_cached_tokens"):
            np.testing.assert_array_equal(b.column(name), c.column(name), err_msg=name)
    assert hits > 0  # the scenarios exercise the tier


# -- through the whole pipeline --------------------------------------------------------------------

BASE = {
    "seed": 5,
    "workload": {
        "kind": "synthetic", "num_requests": 300,
        "arrival": {"process": "poisson", "rate": 10.0},
        "input": {"dist": "lognormal", "median": 3000, "sigma": 0.6, "max": 16000},
        "output": {"dist": "lognormal", "median": 100, "sigma": 0.5, "max": 500},
        "prefix": {"num_groups": 40, "length": 2048, "share": 0.9},
    },
    "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "workers": 1},
    "output": {"dir": None},
}


@pytest.mark.parametrize("engine", [
    {"name": "sglang", "mem_fraction_static": 0.25},
    {"name": "vllm", "gpu_memory_utilization": 0.3},
])
def test_predict_reports_host_hits(engine):
    out = {}
    for gb in (0, 16):
        cfg = dict(BASE, deployment=dict(BASE["deployment"], engine=dict(engine, host_kv_gb=gb)))
        pred = servesim.predict(cfg)
        assert pred.summary["requests"]["completed"] == 300
        out[gb] = pred.summary["cache"]
    assert out[0]["host_cached_tokens"] == 0
    assert out[16]["host_cached_tokens"] > 0
    assert out[16]["cached_tokens"] > out[0]["cached_tokens"]
