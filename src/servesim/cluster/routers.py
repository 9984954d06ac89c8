"""Routers: pick the worker a request goes to.

A router sees the request and the workers' published state; its decision must depend
only on those and the run's seed, so that runs are reproducible.

Routers that read load use :meth:`Engine.snapshot` (the worker's published queue and
cache state).  Where several workers are equally good, :class:`_TieBreaker` picks the
first of them at or after a cursor that moves past each pick (round-robin among ties):
deterministic, and it spreads a burst over idle workers instead of piling it on worker 0.

docs/routing.md describes each router, its options and measured behaviour.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, Sequence

import numpy as np

from servesim.cluster.kv_index import KVIndex
from servesim.cluster.worker import Worker
from servesim.workload.request import Request


class Router(Protocol):
    #: True when ``choose`` reads the workers' state (their engines' snapshots or KV events):
    #: the simulation then brings every worker's decode stretch up to the arrival's instant
    #: first (:meth:`Worker.settle`), so the router sees what pass-by-pass simulation shows.
    reads_state: bool

    def choose(self, req: Request, workers: Sequence[Worker], now: float) -> int:
        """Index of the worker that gets ``req``."""
        ...


LOAD_METRICS = ("tokens", "requests")
DECODE_LOADS = ("outstanding", "kv")


def worker_load(worker: Worker, metric: str) -> float:
    """A worker's load: ``tokens`` = outstanding tokens (queued prompts' uncomputed tokens plus
    every remaining output token), ``requests`` = running + waiting requests."""
    snap = worker.engine.snapshot()
    if metric == "tokens":
        return float(snap.outstanding_tokens)
    return float(snap.running + snap.waiting)


class _TieBreaker:
    """Round-robin among tied candidates: the first tied index at or after a moving cursor."""

    def __init__(self) -> None:
        self._cursor = 0

    def pick(self, tied: Sequence[int], n: int) -> int:
        c = self._cursor % n
        best = min(tied, key=lambda i: (i - c) % n)
        self._cursor = best + 1
        return best


def _argmin_ties(values: Sequence[float], tol: float = 1e-9) -> list[int]:
    lo = min(values)
    return [i for i, v in enumerate(values) if v <= lo + tol]


class RoundRobinRouter:
    """Cycles through the workers in order, ignoring their state."""

    reads_state = False

    def __init__(self) -> None:
        self._next = 0

    def choose(self, req: Request, workers: Sequence[Worker], now: float) -> int:
        i = self._next % len(workers)
        self._next += 1
        return i


class RandomRouter:
    """Uniformly random worker, drawn from the run's seeded generator."""

    reads_state = False

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def choose(self, req: Request, workers: Sequence[Worker], now: float) -> int:
        return int(self._rng.integers(len(workers)))


class LeastLoadedRouter:
    """The worker with the least load, by outstanding tokens or by requests (``load_metric``).

    The classic join-the-shortest-queue policy (the "least request" / "least load"
    balancers of Envoy, NGINX and SGLang's router ``shortest_queue`` policy).  Ties:
    round-robin among the tied workers.
    """

    reads_state = True

    def __init__(self, load_metric: str = "tokens") -> None:
        if load_metric not in LOAD_METRICS:
            raise ValueError(f"load_metric must be one of {LOAD_METRICS}, got {load_metric!r}")
        self.load_metric = load_metric
        self._ties = _TieBreaker()

    def choose(self, req: Request, workers: Sequence[Worker], now: float) -> int:
        loads = [worker_load(w, self.load_metric) for w in workers]
        return self._ties.pick(_argmin_ties(loads), len(workers))


class PowerOfTwoRouter:
    """Samples two distinct workers with the run's seeded generator and takes the less loaded.

    "The power of two choices" (Mitzenmacher 2001; Azar et al. 1994): nearly the balance
    of least-loaded while reading only two workers' state; used by SGLang's router
    (``power_of_two``) and Envoy/NGINX.  Ties go to the first sampled worker.
    ``load_metric`` as for :class:`LeastLoadedRouter`.
    """

    reads_state = True

    def __init__(self, seed: int, load_metric: str = "tokens") -> None:
        if load_metric not in LOAD_METRICS:
            raise ValueError(f"load_metric must be one of {LOAD_METRICS}, got {load_metric!r}")
        self.load_metric = load_metric
        self._rng = np.random.default_rng(seed)

    def choose(self, req: Request, workers: Sequence[Worker], now: float) -> int:
        n = len(workers)
        if n == 1:
            return 0
        a, b = (int(x) for x in self._rng.choice(n, size=2, replace=False))
        la = worker_load(workers[a], self.load_metric)
        lb = worker_load(workers[b], self.load_metric)
        return b if lb < la else a


class KVAwareRouter:
    """Cost-based KV-aware routing, after NVIDIA Dynamo's KV router.

    For each worker ``w``, with ``B = ceil(input_length / block_size)`` prompt blocks:

    * ``overlap_w``: leading prompt blocks (trace ``hash_ids``, in order, up to the first
      miss) that ``w``'s cache is believed to hold — from the :class:`KVIndex`, i.e. from
      KV events delivered with the index's delay, never from the cache itself;
    * ``prefill_w = B - overlap_w``: blocks ``w`` would have to compute;
    * ``load_w`` in blocks of ``block_size`` tokens: with ``decode_load="outstanding"``
      (default) the worker's outstanding tokens / block_size (queued prompts not yet
      computed plus all remaining output tokens of its requests); with ``"kv"`` its KV in
      use by requests / block_size (Dynamo's "active blocks"; blind to queued requests);
    * ``cost_w = overlap_weight * prefill_w + load_w``.

    ``temperature == 0``: the minimum cost wins, ties round-robin among the tied workers.
    ``temperature > 0``: a worker is sampled with probability proportional to
    ``exp(-(cost_w - min cost) / temperature)`` (temperature in blocks) from the run's
    seeded generator, as Dynamo's ``--router-temperature`` softmax.
    """

    reads_state = True

    def __init__(self, seed: int, kv_index: KVIndex, overlap_weight: float = 1.0,
                 temperature: float = 0.0, decode_load: str = "outstanding") -> None:
        if overlap_weight < 0:
            raise ValueError(f"overlap_weight must be >= 0, got {overlap_weight}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if decode_load not in DECODE_LOADS:
            raise ValueError(f"decode_load must be one of {DECODE_LOADS}, got {decode_load!r}")
        self.index = kv_index
        self.overlap_weight = float(overlap_weight)
        self.temperature = float(temperature)
        self.decode_load = decode_load
        self._rng = np.random.default_rng(seed)
        self._ties = _TieBreaker()
        #: The last decision's per-worker overlaps and costs (for tests and debugging).
        self.last_overlaps: list[int] = []
        self.last_costs: list[float] = []

    def costs(self, req: Request, workers: Sequence[Worker], now: float) -> list[float]:
        self.index.advance(now)
        bs = req.block_size
        total = -(-req.input_length // bs)
        overlaps = self.index.overlaps(req, len(workers))
        costs = []
        for w, ov in zip(workers, overlaps):
            snap = w.engine.snapshot()
            used = snap.outstanding_tokens if self.decode_load == "outstanding" else snap.kv_used_tokens
            prefill = max(total - ov, 0)
            costs.append(self.overlap_weight * prefill + used / bs)
        self.last_overlaps, self.last_costs = overlaps, costs
        return costs

    def choose(self, req: Request, workers: Sequence[Worker], now: float) -> int:
        costs = self.costs(req, workers, now)
        if self.temperature > 0 and len(workers) > 1:
            lo = min(costs)
            p = np.array([math.exp(-(c - lo) / self.temperature) for c in costs])
            p /= p.sum()
            return int(self._rng.choice(len(workers), p=p))
        return self._ties.pick(_argmin_ties(costs), len(workers))


class SessionAffinityRouter:
    """Sticky sessions: every turn of a session goes where its first turn went.

    The first turn (and every request without ``session_id``) is placed by the
    ``fallback`` router (least-loaded by default), so a conversation's growing prefix stays
    in one cache — the session/consistent-hash stickiness of SGLang's router and of
    gateway "sticky session" balancers, without their hashing.  A session whose worker
    no longer exists is placed again.
    """

    def __init__(self, fallback: Router) -> None:
        self.fallback = fallback
        self.reads_state = fallback.reads_state
        self._home: dict[str, int] = {}

    def choose(self, req: Request, workers: Sequence[Worker], now: float) -> int:
        sid = req.session_id
        if sid is None:
            return self.fallback.choose(req, workers, now)
        home = self._home.get(sid)
        if home is None or home >= len(workers):
            home = self.fallback.choose(req, workers, now)
            self._home[sid] = home
        return home


ROUTERS = ("round_robin", "random", "least_loaded", "power_of_two", "kv_aware", "session_affinity")

_OPTIONS = {
    "round_robin": set(),
    "random": set(),
    "least_loaded": {"load_metric"},
    "power_of_two": {"load_metric"},
    "kv_aware": {"overlap_weight", "temperature", "decode_load"},
    "session_affinity": {"fallback", "load_metric", "overlap_weight", "temperature", "decode_load"},
}


def build_router(name: str, seed: int, options: dict[str, Any] | None = None,
                 kv_index: KVIndex | None = None) -> Router:
    """The router called ``name`` with ``options`` (see docs/routing.md).

    ``kv_index``: the KV event index, required by ``kv_aware`` (and by a
    ``session_affinity`` whose fallback is ``kv_aware``).
    """
    opts = dict(options or {})
    if name not in _OPTIONS:
        raise ValueError(f"unknown router {name!r}; expected one of {', '.join(ROUTERS)}")
    unknown = set(opts) - _OPTIONS[name]
    if unknown:
        allowed = ", ".join(sorted(_OPTIONS[name])) or "none"
        raise ValueError(f"router {name!r} has no option {', '.join(sorted(unknown))}; options: {allowed}")
    if name == "round_robin":
        return RoundRobinRouter()
    if name == "random":
        return RandomRouter(seed)
    if name == "least_loaded":
        return LeastLoadedRouter(**opts)
    if name == "power_of_two":
        return PowerOfTwoRouter(seed, **opts)
    if name == "kv_aware":
        if kv_index is None:
            raise ValueError("router 'kv_aware' needs a KVIndex fed by the workers' KV events (kv_index=...)")
        return KVAwareRouter(seed, kv_index, **opts)
    # session_affinity
    fallback = opts.pop("fallback", "least_loaded")
    if fallback == "session_affinity":
        raise ValueError("session_affinity's fallback cannot be session_affinity")
    return SessionAffinityRouter(build_router(fallback, seed, opts, kv_index))
