"""Routers: pick the worker a request goes to.

A router sees the request and the workers' published state; its decision must depend
only on those and the run's seed, so that runs are reproducible.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from servesim.cluster.worker import Worker
from servesim.workload.request import Request


class Router(Protocol):
    def choose(self, req: Request, workers: Sequence[Worker], now: float) -> int:
        """Index of the worker that gets ``req``."""
        ...


class RoundRobinRouter:
    """Cycles through the workers in order, ignoring their state."""

    def __init__(self) -> None:
        self._next = 0

    def choose(self, req: Request, workers: Sequence[Worker], now: float) -> int:
        i = self._next % len(workers)
        self._next += 1
        return i


class RandomRouter:
    """Uniformly random worker, drawn from the run's seeded generator."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def choose(self, req: Request, workers: Sequence[Worker], now: float) -> int:
        return int(self._rng.integers(len(workers)))


def build_router(name: str, seed: int) -> Router:
    if name == "round_robin":
        return RoundRobinRouter()
    if name == "random":
        return RandomRouter(seed)
    raise ValueError(f"unknown router {name!r}")
