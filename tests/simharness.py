"""Build and run a one-engine simulation directly (scenario tests), or drive one engine by
hand under a random workload (property tests)."""

from __future__ import annotations

import random
import sys
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import numpy as np

from servesim.cluster.routers import RoundRobinRouter
from servesim.cluster.worker import Worker
from servesim.compiled import CORES
from servesim.engines.base import Engine
from servesim.kvcache import segments
from servesim.kvcache.lru_pool import compiled_core_available
from servesim.metrics.recorder import RequestRecorder, Status
from servesim.perf.simple import FixedStepTime
from servesim.sim.simulation import Simulation
from servesim.workload import request
from servesim.workload.request import Request


#: The core ``python_versions`` leaves on: the compiled simulation types its queue as the
#: compiled ``EventQueue`` (sim/simulation.pxd), so the two go together.
KEEP_COMPILED = ("sim._event_core",)


@contextmanager
def python_versions() -> Iterator[None]:
    """Inside this block the compiled cores are off: objects built here use the Python versions
    (their reference), and the functions bound at import (the segment arithmetic,
    ``sequence_units``) are the Python ones.

    Each user of a core binds it once, at import, as its global ``_core`` (servesim/compiled.py),
    so this swaps those bindings: every servesim module's ``_core`` that holds a core becomes
    None, as ``SERVESIM_PURE_PYTHON=1`` would have made it, except :data:`KEEP_COMPILED`."""
    cores = {id(sys.modules[f"servesim.{name}"]) for name in CORES
             if f"servesim.{name}" in sys.modules and name not in KEEP_COMPILED}
    python = dict(segments.PYTHON_VERSIONS, sequence_units=request.python_sequence_units)
    current = {name: getattr(segments, name) for name in segments.PYTHON_VERSIONS}
    current["sequence_units"] = request.sequence_units
    servesim_modules = [mod for mod in list(sys.modules.values()) if getattr(mod, "__name__", "").startswith("servesim")]
    # Every servesim module that bound one of them at import (``from ... import name``).
    bound = [(mod, name, fn, python[name]) for mod in servesim_modules
             for name, fn in current.items() if getattr(mod, name, None) is fn]
    bound += [(mod, "_core", mod._core, None) for mod in servesim_modules if id(getattr(mod, "_core", None)) in cores]
    for mod, name, _, replacement in bound:
        setattr(mod, name, replacement)
    try:
        yield
    finally:
        for mod, name, value, _ in bound:
            setattr(mod, name, value)


def pool_kinds() -> tuple[bool, ...]:
    """``python`` flags to build engines with: the Python pool, and the compiled one when built."""
    return (True, False) if compiled_core_available() else (True,)


class RecordingStepTime(FixedStepTime):
    """A fixed pass time that keeps every plan it prices."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.plans = []

    def pass_time(self, plan):
        self.plans.append(plan)
        return super().pass_time(plan)


def make_request(i: int, arrival: float, inp: int, out: int, hash_ids: Sequence[int] | None = None,
                 block_size: int = 512) -> Request:
    n_blocks = -(-inp // block_size)
    ids = tuple(hash_ids) if hash_ids is not None else tuple(1_000_000 * (i + 1) + b for b in range(n_blocks))
    return Request(index=i, request_id=f"r{i}", arrival=arrival, input_length=inp, output_length=out,
                   hash_ids=ids, block_size=block_size)


def run(engines: Callable[[int, RequestRecorder], Engine], requests: list[Request], step: float = 0.01,
        workers: int = 1, fast: bool = False, step_time=None) -> tuple[RequestRecorder, list[Worker]]:
    rec = RequestRecorder()
    st = step_time or FixedStepTime(step)
    ws = [Worker(i, engines(i, rec), st, 1, fast_forward=fast) for i in range(workers)]
    Simulation(iter(requests), "open", None, ws, RoundRobinRouter(), rec).run()
    return rec, ws


def random_block_workload(rng: random.Random, n: int, max_in: int = 120, max_out: int = 40) -> list[Request]:
    """``n`` requests with bursty arrivals whose first two trace blocks come from a small set
    (so prefixes are shared) and the rest from a larger one."""
    unit = rng.choice([8, 16])
    t = 0.0
    out = []
    for i in range(n):
        t += rng.choice([0.0, 0.0, rng.uniform(0, 0.05)])
        n_in = rng.randint(1, max_in)
        nb = -(-n_in // unit)
        ids = tuple(rng.randrange(3) if k < 2 else rng.randrange(20) for k in range(nb))
        out.append(Request(index=i, request_id=f"r{i}", arrival=t, input_length=n_in,
                           output_length=rng.randint(1, max_out), hash_ids=ids, block_size=unit))
    return out


def drive_by_hand(eng: Engine, rec: RequestRecorder, reqs: list[Request], rng: random.Random,
                  step: float = 0.01, max_passes: int = 20_000,
                  on_plan: Callable[[object], None] | None = None) -> None:
    """Run one engine without the simulation loop: arrivals, ``schedule``, then ``complete``
    or a random-length ``complete_stretch`` of decode-only passes, with ``check_invariants``
    after every pass.  Checks that every request ends in exactly one terminal state."""
    for r in reqs:
        rec.register(r.index, r.request_id, None, 0, r.input_length, r.output_length, False)
    now, i, passes = 0.0, 0, 0
    while True:
        while i < len(reqs) and reqs[i].arrival <= now:
            rec.arrived(reqs[i].index, now)
            eng.add_request(reqs[i], now)
            i += 1
        plan = eng.schedule(now)
        if plan is None:
            eng.check_invariants()
            if i < len(reqs):
                now = max(now, reqs[i].arrival)
                continue
            break
        if on_plan is not None:
            on_plan(plan)
        k = rng.randint(1, eng.decode_stretch_limit()) if plan.is_decode_only else 1
        ends = now + step * np.arange(1, k + 1)
        if k == 1:
            eng.complete(plan, float(ends[0]))
        else:
            eng.complete_stretch(plan, ends)
        now = float(ends[-1])
        eng.check_invariants()
        passes += 1
        assert passes < max_passes, "engine does not make progress"
    assert not eng.has_work()
    assert sorted(r.index for r in eng.terminated) == list(range(len(reqs)))
    assert (rec.column("status") != Status.PENDING).all()


def drive_lockstep(engines: Sequence[tuple[Engine, RequestRecorder]], reqs: list[Request], rng: random.Random,
                   plan_state: Callable[[object], object], engine_state: Callable[[Engine], object],
                   step: float = 0.01, max_passes: int = 5000,
                   columns: Sequence[str] = ("first_token", "last_token", "finish")) -> tuple[int, int]:
    """Run engines side by side on the same arrivals and stretch lengths, comparing after each pass.

    Every engine must produce the same plan (``plan_state``) and state (``engine_state``) after
    every ``schedule`` and every commit, and the same ``decode_stretch_limit``; a decode-only
    plan is committed as a stretch of random length up to it.  Ends by comparing the
    recorders' ``columns`` byte for byte.  Returns (passes, stretches longer than one pass).
    """
    for _eng, rec in engines:
        for r in reqs:
            rec.register(r.index, r.request_id, None, 0, r.input_length, r.output_length, False)
    now, i, passes, stretches = 0.0, 0, 0, 0

    def same_state() -> None:
        states = [repr(engine_state(eng)) for eng, _ in engines]
        assert all(s == states[0] for s in states)

    while passes < max_passes:
        while i < len(reqs) and reqs[i].arrival <= now:
            for eng, rec in engines:
                rec.arrived(reqs[i].index, now)
                eng.add_request(reqs[i], now)
            i += 1
        plans = [eng.schedule(now) for eng, _ in engines]
        plan_states = [repr(plan_state(p)) if p is not None else None for p in plans]
        assert all(p == plan_states[0] for p in plan_states), plan_states
        same_state()
        if plans[0] is None:
            if i < len(reqs):
                now = max(now, reqs[i].arrival)
                continue
            break
        limits = {eng.decode_stretch_limit() for eng, _ in engines}
        assert len(limits) == 1
        k = rng.randint(1, limits.pop()) if plans[0].is_decode_only else 1
        stretches += k > 1
        ends = now + step * np.arange(1, k + 1)
        for (eng, _), plan in zip(engines, plans):
            if k == 1:
                eng.complete(plan, float(ends[0]))
            else:
                eng.complete_stretch(plan, ends)
            eng.check_invariants()
        same_state()
        now = float(ends[-1])
        passes += 1
    cols = [{name: rec.column(name).tobytes() for name in columns}  # bytes: NaN equals NaN
            for _, rec in engines]
    assert all(c == cols[0] for c in cols)
    return passes, stretches
