"""vLLM's private blocks: leaving unshared blocks out of the prefix-cache map changes nothing.

A vLLM engine told the workload's shared block ids (``use_shared_block_ids``) does not
register a block that no other request can look up until its request is preempted
(``engines/vllm.py``, "private blocks").  Against the same engine registering every full
block, on random workloads with shared prefixes, unique tails and preemptions, after every
pass: the same plans, the same blocks held and freed in the same order, the same prefix-cache
answers; its map holds a subset of the reference's, each hash on the same block.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockkv_harness import build_engines
from servesim import api
from servesim.api import predict
from servesim.engines.base import EngineLimits
from servesim.engines.vllm.scheduler import VLLMEngine
from servesim.engines.vllm.options import VLLMOptions
from servesim.kvcache.block_owner import NO_PRIVATE_BLOCKS
from servesim.metrics.recorder import RequestRecorder
from servesim.workload.request import OUTPUT_ID_BASE, Request, output_block_id
from servesim.workload.sharing import shared_block_ids
from servesim.workload.source import WorkloadSource
from simharness import drive_lockstep, pool_kinds


def source_of(reqs: list[Request]) -> WorkloadSource:
    return WorkloadSource(mode="open", concurrency=None, description="test", _factory=lambda: iter(reqs))


def private_tail_workload(rng: random.Random, n: int) -> list[Request]:
    """Requests whose first units come from a few shared ids and whose other units are their own."""
    unit = rng.choice([4, 8, 16])
    t, out, fresh = 0.0, [], 1000
    for i in range(n):
        t += rng.choice([0.0, 0.0, rng.uniform(0, 0.05)])
        n_in = rng.randint(1, 120)
        ids = []
        for k in range(-(-n_in // unit)):
            if k < rng.choice([0, 1, 2, 3]):
                ids.append(rng.randrange(3))
            else:
                ids.append(fresh)
                fresh += 1
        out.append(Request(index=i, request_id=f"r{i}", arrival=t, input_length=n_in,
                           output_length=rng.randint(1, 60), hash_ids=tuple(ids), block_size=unit))
    return out


def engine_state(eng: VLLMEngine) -> tuple:
    """What both engines must agree on: requests, blocks, free order, references (not the map)."""
    reqs = [(vr.req.index, computed, generated, sched, list(vr.blocks), vr.n_cached)
            for vr, computed, sched, generated in eng.running_progress()]
    waiting = [(vr.req.index, vr.computed) for vr in eng.waiting]
    pool = eng.pool
    return reqs, waiting, pool.free_order(), list(pool.refs), eng.retractions


def plan_state(plan) -> tuple:
    return (plan.prefill_new.tolist(), plan.prefill_cached.tolist(), plan.decode_ctx.tolist(),
            plan.is_decode_only, [vr.req.index for vr in plan.requests.reqs])


def make_engines(opt: VLLMOptions, kv: int, shared: frozenset[int]) -> list[tuple[VLLMEngine, RequestRecorder]]:
    """The reference (every full block registered), then the engine told the shared ids, on
    each pool kind."""
    out = build_engines([(VLLMEngine, python) for python in pool_kinds() for _use in (False, True)], opt, kv)
    for eng, _ in out[1::2]:  # each second engine defers the blocks no other request shares
        assert eng.wants_shared_block_ids()
        eng.use_shared_block_ids(shared)
    return out


def check_maps(engines) -> None:
    """Each deferring engine's map is a subset of its reference's (each hash on the same block)."""
    for ref, (eng, _) in zip(engines[0::2], engines[1::2]):
        full, part = ref[0].pool.cached_map(), eng.pool.cached_map()
        assert all(full.get(h) == b for h, b in part.items())


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 16))
def test_private_blocks_change_no_plan_or_block(seed: int, n: int) -> None:
    rng = random.Random(seed)
    reqs = private_tail_workload(rng, n)
    bs = rng.choice([1, 2, 4, 16])
    opt = VLLMOptions(block_size=bs, max_num_batched_tokens=rng.randint(8, 200), max_num_seqs=rng.randint(1, 10),
                      max_model_len=rng.randint(64, 300),
                      long_prefill_token_threshold=rng.choice([0, 0, rng.randint(1, 50)]))
    kv = bs * rng.randint(3, 60) + bs  # small pools: preemptions
    engines = make_engines(opt, kv, shared_block_ids(source_of(reqs)))

    def state(eng: VLLMEngine) -> tuple:
        check_maps(engines)
        return engine_state(eng)

    drive_lockstep(engines, reqs, rng, plan_state, state, columns=("first_token", "last_token", "finish", "generated"))


def test_private_blocks_stay_out_of_the_map_until_a_preemption() -> None:
    """A long run with preemptions: the map really is smaller, and a preempted request's
    private blocks are registered when it is preempted (it registers all blocks after)."""
    rng = random.Random(3)
    reqs = private_tail_workload(rng, 40)
    opt = VLLMOptions(block_size=4, max_num_batched_tokens=256, max_num_seqs=16, max_model_len=300)
    engines = make_engines(opt, 4 * 120, shared_block_ids(source_of(reqs)))
    smaller, preempted = [], []
    deferring = engines[1][0]

    def state(eng: VLLMEngine) -> tuple:
        check_maps(engines)
        smaller.append(len(deferring.pool.cached_map()) < len(engines[0][0].pool.cached_map()))
        # A request back in the waiting queue was preempted: it registers every block from now on.
        again = [vr for vr in deferring.waiting if vr.admitted_once]
        assert all(vr.private_from == NO_PRIVATE_BLOCKS for vr in again)
        preempted.extend(again)
        return engine_state(eng)

    drive_lockstep(engines, reqs, rng, plan_state, state)
    assert any(smaller)
    assert deferring.retractions > 0 and preempted


def test_private_from_is_the_first_block_of_an_unshared_unit() -> None:
    eng = VLLMEngine(0, RequestRecorder(), EngineLimits(kv_capacity_tokens=4096, context_length=4096),
                     VLLMOptions(block_size=4, max_model_len=1024))
    eng.use_shared_block_ids(frozenset({7, 8}))
    req = Request(index=5, request_id="r", arrival=0.0, input_length=30, output_length=4, hash_ids=(7, 8, 9, 7),
                  block_size=10)
    assert eng._private_from(req) == 5  # unit 2 (id 9) starts at token 20: block 5
    req = req.replace(hash_ids=(7, 8, 7), output_hash_ids=(8,))
    assert eng._private_from(req) == 10  # the first generated unit, token 40
    # Unit 4 is generated: its id is output_block_id(5, 1) (counted from the prompt's end).
    eng.use_shared_block_ids(frozenset({7, 8, output_block_id(5, 0), OUTPUT_ID_BASE}))
    assert eng._private_from(req) == 10
    eng.use_shared_block_ids(frozenset({7, 8, output_block_id(5, 1), OUTPUT_ID_BASE}))
    assert eng._private_from(req) == 12  # listed by the workload too: the next unit, token 50


def _vllm_config(share: float) -> dict:
    return {"seed": 3,
            "workload": {"kind": "synthetic", "num_requests": 400, "arrival": {"process": "poisson", "rate": 40.0},
                         "input": {"dist": "uniform", "low": 200, "high": 1500},
                         "output": {"dist": "uniform", "low": 20, "high": 300},
                         "prefix": {"num_groups": 4, "length": 512, "share": share}},
            "deployment": {"model": "Qwen/Qwen3-8B", "gpu": "h100_sxm", "workers": 2,
                           "engine": {"name": "vllm", "gpu_memory_utilization": 0.25}},
            "output": {"dir": None, "timeseries": False}}


@pytest.mark.parametrize("share", [0.0, 0.7])
def test_a_run_is_the_same_with_and_without_private_blocks(monkeypatch, share) -> None:
    """Whole runs (prefix groups, preemptions): every request's timeline is identical."""
    with_private = predict(_vllm_config(share))
    assert all(w.engine._shared is not None for w in with_private.stats.workers)  # private blocks in use
    monkeypatch.setattr(api, "shared_block_ids", lambda source: None)  # the engines then register every block
    reference = predict(_vllm_config(share))
    assert reference.summary["retractions"]["total"] > 0
    assert reference.summary["requests"] == with_private.summary["requests"]
    for col in ("first_token", "last_token", "finish", "generated", "cached_tokens"):
        assert reference.recorder.column(col).tobytes() == with_private.recorder.column(col).tobytes(), col
