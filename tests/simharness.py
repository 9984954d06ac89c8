"""Build and run a one-engine simulation directly, for scenario tests."""

from __future__ import annotations

from typing import Callable, Sequence

from servesim.cluster.routers import RoundRobinRouter
from servesim.cluster.worker import Worker
from servesim.engines.base import Engine
from servesim.metrics.recorder import RequestRecorder
from servesim.perf.simple import FixedStepTime
from servesim.sim.simulation import Simulation
from servesim.workload.request import Request


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
