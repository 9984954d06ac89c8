"""The harness the vLLM and TensorRT-LLM tests share: both engines sit on the block-KV manager
(engines/blockkv/) and are tested the same way, so the scaffolding lives once, here.

* scenario tests: :func:`req` and :func:`run_engine` (one worker under a fixed 10 ms pass,
  every plan kept);
* property tests: :func:`check_random_workload` (invariants after every pass, one terminal
  state per request) and :func:`assert_fast_equals_step` (fast-forward equals pass-by-pass);
* fast-path tests: :func:`build_engines` (the same options on engines using the Python
  versions and the compiled parts), whose results :func:`simharness.drive_lockstep` compares;
  :func:`pool_state` is the pool part of their engine states.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from servesim.cluster.routers import RoundRobinRouter
from servesim.cluster.worker import Worker
from servesim.engines.base import Engine, EngineLimits
from servesim.metrics.recorder import RequestRecorder, Status
from servesim.perf.simple import LinearStepTime
from servesim.sim.simulation import Simulation
from servesim.workload.request import Request
from simharness import RecordingStepTime, drive_by_hand, python_versions, random_block_workload

#: The fixed pass time of the scenario tests, which compute their schedules by hand.
STEP = 0.01
#: Pass times of the fast-equals-step checks (composition-dependent, so stretches are priced
#: by their contexts).
BLOCK_POOL_STEP = dict(base_s=0.01, per_prefill_token_s=1e-5, per_decode_request_s=1e-4, per_context_token_s=1e-7)
#: The per-request times fast-forward must reproduce within rounding, and the counts it must
#: reproduce exactly.
TIMES = ("first_token", "second_token", "last_token", "finish")
COUNTS = ("generated", "retractions", "cached_tokens", "status")


def limits(kv_tokens: int, context: int = 4096) -> EngineLimits:
    return EngineLimits(kv_capacity_tokens=kv_tokens, context_length=context)


# -- scenarios ------------------------------------------------------------------------------------
def req(i: int, arrival: float, n_in: int, n_out: int, ids=None, unit: int = 16) -> Request:
    """Request ``i``; its trace blocks are its own unless ``ids`` names them (to share a prefix)."""
    if ids is None:
        ids = tuple(1000 * (i + 1) + k for k in range(-(-n_in // unit)))
    return Request(index=i, request_id=f"r{i}", arrival=arrival, input_length=n_in, output_length=n_out,
                   hash_ids=tuple(ids), block_size=unit)


def run_engine(engine_cls: type[Engine], options, requests: Iterable[Request], kv_tokens: int = 100_000,
               context: int = 4096, fast: bool = False) -> tuple[RequestRecorder, Engine, list]:
    """``requests`` through one worker of ``engine_cls(…, options)`` under a fixed :data:`STEP`
    pass: the recorder, the engine and every plan priced, in order."""
    rec = RequestRecorder()
    eng = engine_cls(0, rec, limits(kv_tokens, context), options)
    st = RecordingStepTime(STEP)
    worker = Worker(0, eng, st, 1, fast_forward=fast)
    Simulation(iter(requests), "open", None, [worker], RoundRobinRouter(), rec).run()
    return rec, eng, st.plans


# -- properties -----------------------------------------------------------------------------------
def check_random_workload(make_engine: Callable[[random.Random, RequestRecorder, list[Request]], Engine],
                          seed: int, n: int) -> None:
    """``n`` random requests driven by hand through ``make_engine(rng, rec, reqs)``: invariants
    after every pass, one terminal state per request, outputs within bounds, pool empty at the end."""
    rng = random.Random(seed)
    reqs = random_block_workload(rng, n)
    rec = RequestRecorder()
    eng = make_engine(rng, rec, reqs)
    drive_by_hand(eng, rec, reqs, rng)
    ok = rec.column("status") == Status.COMPLETED
    gen = rec.column("generated")
    assert (gen[ok] >= 1).all() and (gen[ok] <= rec.column("output_length")[ok]).all()
    assert eng.pool.num_used_blocks == 0


def simulate_one_worker(engine_cls: type[Engine], reqs: list[Request], opt, kv: int, fast: bool) -> RequestRecorder:
    """``reqs`` through one worker of ``engine_cls(…, opt)`` with ``kv`` tokens of KV, in fast or
    step mode, priced by :data:`BLOCK_POOL_STEP`."""
    rec = RequestRecorder()
    eng = engine_cls(0, rec, limits(kv), opt)
    st = LinearStepTime(**BLOCK_POOL_STEP)
    Simulation(iter(reqs), "open", None, [Worker(0, eng, st, 1, fast_forward=fast)], RoundRobinRouter(), rec).run()
    return rec


def spread_workload(seed: int, max_in: int) -> list[Request]:
    """60 random requests with arrivals spread out, so that decode stretches form between them."""
    rng = random.Random(seed)
    reqs = random_block_workload(rng, 60, max_in=max_in, max_out=120)
    for j, r in enumerate(reqs):
        r.arrival = 0.3 * j + r.arrival
    return reqs


def assert_fast_equals_step(engine_cls: type[Engine], reqs: list[Request], opt, kv: int) -> None:
    """Fast-forward gives step mode's :data:`TIMES` (to rounding) and :data:`COUNTS` (exactly)."""
    a = simulate_one_worker(engine_cls, reqs, opt, kv, fast=False)
    b = simulate_one_worker(engine_cls, reqs, opt, kv, fast=True)
    for name in TIMES:
        np.testing.assert_allclose(a.column(name), b.column(name), rtol=1e-9, err_msg=name)
    for name in COUNTS:
        assert a.column(name).tolist() == b.column(name).tolist(), name


# -- fast paths -----------------------------------------------------------------------------------
def build_engine(engine_cls: type[Engine], opt, kv: int, python: bool) -> tuple[Engine, RequestRecorder]:
    """One engine and its recorder; ``python``: built on the Python versions of the compiled parts."""
    rec = RequestRecorder()
    if python:
        with python_versions():
            return engine_cls(0, rec, limits(kv), opt), rec
    return engine_cls(0, rec, limits(kv), opt), rec


def build_engines(variants: Sequence[tuple[type[Engine], bool]], opt, kv: int) -> list[tuple[Engine, RequestRecorder]]:
    """:func:`build_engine` for each ``(engine class, python)`` of ``variants``, in order."""
    return [build_engine(cls, opt, kv, python) for cls, python in variants]


def pool_state(eng: Engine) -> tuple:
    """The block pool's free order, cached map, references and hashes: what equal runs share."""
    pool = eng.pool
    return pool.free_order(), sorted(pool.cached_map().items()), list(pool.refs), list(pool.hashes)
