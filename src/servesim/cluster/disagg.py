"""Disaggregated prefill and decode: two worker pools joined by a KV link.

A request first goes (through the deployment's router) to a *prefill* worker, which runs
its prompt and samples the first token exactly as its engine would for a request of one
output token (the engine sees a copy of the request with ``output_length = 1``).  When
that prefill ends, the request is handed off:

1. a decode worker is chosen (``decode_router``: least loaded, round robin, or the one
   already holding the longest prefix of the prompt);
2. the prompt's KV moves over the link: only the tokens the decode worker does not
   already hold (its own prefix cache), ``bytes = tokens × KV bytes per token`` of the
   whole model.  Each prefill worker's outbound link and each decode worker's inbound
   link carries one transfer at a time (FIFO), so a transfer starts at
   ``max(prefill end, sender free, receiver free)`` and ends
   ``bytes / link_gbs + link_latency_us`` later;
3. at the transfer end the request reaches the decode engine with ``kv_ready`` tokens: the
   engine reserves its KV as it would for an admission (its own budget rule; no prefill
   pass) and, once admitted, streams the first token (``first_token_s``) and decodes.

So TTFT covers the prefill queue, the prefill, the transfer and any wait for decode-side
memory.  The milestones are extra columns of requests.parquet: ``prefill_start_s``,
``prefill_end_s``, ``transfer_start_s``, ``transfer_end_s``, ``decode_start_s``,
``decode_worker``, ``transfer_tokens``, ``transfer_bytes``; ``worker`` is the prefill
worker.  docs/disaggregation.md has the config and what is left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from servesim.config.disaggregation import DisaggregationConfig
from servesim.engines.base import Engine, EngineSnapshot
from servesim.metrics.recorder import RequestRecorder, Status
from servesim.perf.plan import PassPlan
from servesim.sim.events import EventKind
from servesim.workload.request import Request

if TYPE_CHECKING:
    from servesim.cluster.deployment import Deployment
    from servesim.cluster.worker import Worker
    from servesim.config.schema import Config
    from servesim.sim.simulation import Simulation


# -- engines ----------------------------------------------------------------------------
class PrefillOnlyEngine:
    """A prefill worker's engine: each request runs as if it wanted one output token.

    Everything but :meth:`add_request` is the wrapped engine's: the engine interface
    (engines/base.py) is passed through method by method.
    """

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.name = inner.name

    def add_request(self, req: Request, now: float, kv_ready: int = 0) -> None:
        self.inner.add_request(req.replace(output_length=1), now)

    @property
    def terminated(self) -> list:
        return self.inner.terminated

    @terminated.setter
    def terminated(self, value: list) -> None:
        self.inner.terminated = value

    @property
    def spec(self):
        return self.inner.spec

    def has_work(self) -> bool:
        return self.inner.has_work()

    def schedule(self, now: float) -> PassPlan | None:
        return self.inner.schedule(now)

    def complete(self, plan: PassPlan, end: float) -> None:
        self.inner.complete(plan, end)

    def complete_stretch(self, plan: PassPlan, ends: np.ndarray) -> None:
        self.inner.complete_stretch(plan, ends)

    def decode_stretch_limit(self) -> int:
        return self.inner.decode_stretch_limit()

    def input_lag_passes(self) -> int:
        return self.inner.input_lag_passes()

    def snapshot(self) -> EngineSnapshot:
        return self.inner.snapshot()

    def abort_all(self, now: float, reason: str) -> None:
        self.inner.abort_all(now, reason)

    def check_invariants(self) -> None:
        self.inner.check_invariants()

    def wants_shared_block_ids(self) -> bool:
        return self.inner.wants_shared_block_ids()

    def use_shared_block_ids(self, shared) -> None:
        self.inner.use_shared_block_ids(shared)

    def kv_cache(self):
        return self.inner.kv_cache()

    def engine_ranks(self) -> list:
        return self.inner.engine_ranks()

    def kv_block_size(self) -> int | None:
        return self.inner.kv_block_size()

    def held_prefix_tokens(self, req: Request) -> int:
        return self.inner.held_prefix_tokens(req)

    def transfers_waiting(self) -> int:
        return self.inner.transfers_waiting()

    def queue_counts(self) -> tuple[int, int]:
        return self.inner.queue_counts()


def held_prefix_tokens(engine, req: Request) -> int:
    """Prompt tokens ``engine`` already holds in its prefix cache (at least one is always sent)."""
    return engine.held_prefix_tokens(req)


# -- recorders --------------------------------------------------------------------------
class _RecorderRelay:
    """Passes what an engine reports to the run's recorder; the pools' recorders below
    change some of it.  Every method an engine or worker calls is listed here."""

    def __init__(self, rec: RequestRecorder) -> None:
        self.rec = rec

    def register(self, *args, **kwargs):
        return self.rec.register(*args, **kwargs)

    def extra(self, name: str, dtype=np.float64, fill=np.nan) -> np.ndarray:
        return self.rec.extra(name, dtype, fill)

    def column(self, name: str) -> np.ndarray:
        return self.rec.column(name)

    def arrived(self, index: int, t: float) -> None:
        self.rec.arrived(index, t)

    def assigned(self, index: int, worker: int) -> None:
        self.rec.assigned(index, worker)

    def scheduled(self, index: int, t: float, cached_tokens: int, host_cached_tokens: int = 0) -> None:
        self.rec.scheduled(index, t, cached_tokens, host_cached_tokens)

    def retracted(self, index: int) -> None:
        self.rec.retracted(index)

    def emit(self, idx: np.ndarray, t: float, tokens_each=1) -> None:
        self.rec.emit(idx, t, tokens_each)

    def emit_stretch(self, idx: np.ndarray, pass_ends: np.ndarray) -> None:
        self.rec.emit_stretch(idx, pass_ends)

    def finished(self, index: int, t: float, status: Status, reason: str = "") -> None:
        self.rec.finished(index, t, status, reason)

    def close_unfinished(self, t: float, reason: str, not_arrived: str | None = None) -> int:
        return self.rec.close_unfinished(t, reason, not_arrived)


class _PrefillRecorder(_RecorderRelay):
    """What prefill engines report: a finished one-token request is a handoff, not an end."""

    def __init__(self, rec: RequestRecorder) -> None:
        super().__init__(rec)
        self.prefilled: set[int] = set()

    def scheduled(self, index: int, t: float, cached_tokens: int, host_cached_tokens: int = 0) -> None:
        self.rec.scheduled(index, t, cached_tokens, host_cached_tokens)
        col = self.rec.extra("prefill_start_s")
        if col[index] != col[index]:
            col[index] = t

    def emit(self, idx: np.ndarray, t: float, tokens_each=1) -> None:
        self.rec.extra("prefill_end_s")[idx] = t

    def emit_stretch(self, idx: np.ndarray, pass_ends: np.ndarray) -> None:
        raise AssertionError("disaggregation: a prefill worker decoded")

    def finished(self, index: int, t: float, status: Status, reason: str = "") -> None:
        if status == Status.COMPLETED:
            self.prefilled.add(index)
        else:
            self.rec.finished(index, t, status, reason)


class _DecodeRecorder(_RecorderRelay):
    """What decode engines report; the first emission of a handed-off request is its decode start."""

    def __init__(self, rec: RequestRecorder) -> None:
        super().__init__(rec)
        self.awaiting = 0  # handed-off requests not yet admitted by their decode engine

    def emit(self, idx: np.ndarray, t: float, tokens_each=1) -> None:
        if self.awaiting and idx.size:
            col = self.rec.extra("decode_start_s")
            fresh = idx[np.isnan(col[idx])]
            if fresh.size:
                col[fresh] = t
                self.awaiting -= int(fresh.size)
        self.rec.emit(idx, t, tokens_each)


# -- the handoff ------------------------------------------------------------------------
class DisaggCoordinator:
    """Moves prefilled requests to decode workers over the KV link (owned by the simulation)."""

    def __init__(self, cfg: DisaggregationConfig, rec: RequestRecorder, prefill_rec: _PrefillRecorder,
                 decode_rec: _DecodeRecorder, prefill: Sequence["Worker"], decode: Sequence["Worker"],
                 kv_bytes_per_token: float) -> None:
        self.cfg = cfg
        self.rec = rec
        self.prefill_rec = prefill_rec
        self.decode_rec = decode_rec
        self.prefill = list(prefill)
        self.decode = list(decode)
        self.n_prefill = len(self.prefill)
        self.bytes_per_token = kv_bytes_per_token
        self.bw = cfg.link_gbs * 1e9
        self.latency = cfg.link_latency_us * 1e-6
        self.out_free = [0.0] * len(self.prefill)
        self.in_free = [0.0] * len(self.decode)
        self.in_flight = [0] * len(self.decode)
        self._rr = 0
        #: Requests routed to a prefill worker and not yet handed off, by index.
        self._originals: dict[int, Request] = {}
        self.transfers = 0
        self.transfer_bytes = 0.0
        for name in ("prefill_start_s", "prefill_end_s", "transfer_start_s", "transfer_end_s", "decode_start_s"):
            rec.extra(name)
        rec.extra("decode_worker", np.int64, -1)
        rec.extra("transfer_tokens", np.int64, 0)
        rec.extra("transfer_bytes", np.float64, 0.0)

    # called by the simulation --------------------------------------------------------------
    def attach(self, sim: "Simulation") -> None:
        """Take the simulation's ``KV_READY`` events (a transfer reaching its decode worker)."""
        sim.register(EventKind.KV_READY, lambda payload, now: self.on_kv_ready(sim, payload, now))

    def after_pass(self, sim: "Simulation", worker: "Worker", done: list[Request], now: float) -> list[Request]:
        """Hand off what a prefill worker finished; returns the requests really terminated."""
        if worker.worker_id >= self.n_prefill:
            return done
        out = []
        prefilled = self.prefill_rec.prefilled
        for req in done:
            if req.index in prefilled:
                prefilled.discard(req.index)
                ended = self._handoff(sim, worker.worker_id, req.index, now)
                if ended is not None:
                    out.append(ended)
            else:  # rejected by the prefill engine: already recorded as terminal
                out.append(self._originals.pop(req.index))
        return out

    def on_kv_ready(self, sim: "Simulation", payload: tuple[int, Request], now: float) -> None:
        """A transfer ended: the request reaches its decode engine with its prompt's KV."""
        d, req = payload
        self.in_flight[d] -= 1
        self.decode_rec.awaiting += 1
        sim.deliver(self.decode[d], req, now, kv_ready=req.input_length)
        if self.rec.column("status")[req.index] != int(Status.PENDING):  # rejected by the decode engine
            self.decode_rec.awaiting -= 1

    # internals ----------------------------------------------------------------------------------
    def remember(self, req: Request) -> None:
        self._originals[req.index] = req

    def _handoff(self, sim: "Simulation", p: int, index: int, now: float) -> Request | None:
        req = self._originals.pop(index)
        rec = self.rec
        if req.output_length <= 1:  # nothing to decode: the prefill's token is the answer
            rec.emit(np.array([index], dtype=np.int64), now)
            rec.finished(index, now, Status.COMPLETED)
            return req
        if self.cfg.decode_router == "kv_aware":  # reads the decode workers' caches
            sim.settle_workers(self.decode, now)
        d = self._choose(req)
        held = min(held_prefix_tokens(self.decode[d].engine, req), req.input_length - 1)
        tokens = req.input_length - held
        nbytes = tokens * self.bytes_per_token
        start = max(now, self.out_free[p], self.in_free[d])
        busy = nbytes / self.bw
        end = start + busy + self.latency
        self.out_free[p] = self.in_free[d] = start + busy
        self.in_flight[d] += 1
        self.transfers += 1
        self.transfer_bytes += nbytes
        rec.extra("transfer_start_s")[index] = start
        rec.extra("transfer_end_s")[index] = end
        rec.extra("decode_worker", np.int64, -1)[index] = self.decode[d].worker_id
        rec.extra("transfer_tokens", np.int64, 0)[index] = tokens
        rec.extra("transfer_bytes", np.float64, 0.0)[index] = nbytes
        sim.post(end, EventKind.KV_READY, (d, req))
        return None

    def _load(self, d: int) -> int:
        eng = self.decode[d].engine
        snap = eng.snapshot()
        return snap.running + snap.waiting + eng.transfers_waiting() + self.in_flight[d]

    def _choose(self, req: Request) -> int:
        n = len(self.decode)
        if n == 1:
            return 0
        mode = self.cfg.decode_router
        if mode == "round_robin":
            d = self._rr % n
            self._rr += 1
            return d
        loads = [self._load(d) for d in range(n)]
        if mode == "kv_aware":
            held = [held_prefix_tokens(w.engine, req) for w in self.decode]
            return min(range(n), key=lambda d: (-held[d], loads[d], d))
        return min(range(n), key=lambda d: (loads[d], d))

    def describe(self) -> dict:
        return {"transfers": self.transfers, "transfer_gb": self.transfer_bytes / 1e9}


class PrefillPoolRouter:
    """The deployment's router, choosing among the prefill workers only (ids 0 .. P-1)."""

    def __init__(self, inner, n_prefill: int, coordinator: DisaggCoordinator) -> None:
        self.inner = inner
        self.n = n_prefill
        self.coordinator = coordinator
        #: The inner router's (cluster/routers.py:Router.reads_state).
        self.reads_state = inner.reads_state

    def choose(self, req: Request, workers: Sequence["Worker"], now: float) -> int:
        self.coordinator.remember(req)
        return self.inner.choose(req, workers[: self.n], now)


# -- the deployment -----------------------------------------------------------------------
KV_DTYPE_BYTES = {"bf16": 2.0, "fp8": 1.0}


@dataclass
class DisaggDeployment:
    """A prefill pool and a decode pool; offers what :class:`Deployment` offers the run."""

    cfg: Any
    dis: DisaggregationConfig
    prefill: "Deployment"
    decode: "Deployment"
    kv_bytes_per_token: float
    coordinator: DisaggCoordinator | None = None
    kv_index: Any = None
    _workers: list = field(default_factory=list)

    @property
    def total_gpus(self) -> int:
        return self.prefill.total_gpus + self.decode.total_gpus

    def make_frontend(self):
        return self.prefill.make_frontend()

    def make_workers(self, recorder: RequestRecorder, fast_forward: bool = True,
                     kv_event_log: Callable | None = None) -> list:
        from servesim.cluster.kv_publish import kv_index_for, wire_kv_events
        from servesim.cluster.worker import Worker

        c = self.cfg
        self.kv_index = kv_index_for(c.router, c.router_options, c.kv_event_delay_s)
        prec, drec = _PrefillRecorder(recorder), _DecodeRecorder(recorder)
        prefill, decode = [], []
        for i in range(self.prefill.cfg.workers):
            eng = self.prefill.engine_factory(i, prec)
            wire_kv_events(eng, i, self.kv_index, kv_event_log)
            prefill.append(Worker(i, PrefillOnlyEngine(eng), self.prefill.step_time,
                                  self.prefill.gpus_per_worker, fast_forward))
        base = len(prefill)
        for j in range(self.decode.cfg.workers):
            wid = base + j
            eng = self.decode.engine_factory(wid, drec)
            wire_kv_events(eng, wid, None, kv_event_log)  # routers index the prefill pool only
            worker = Worker(wid, eng, self.decode.step_time, self.decode.gpus_per_worker, fast_forward)
            worker.settle_on_input = self.dis.decode_router == "kv_aware"  # the hand-off reads its cache
            decode.append(worker)
        self.coordinator = DisaggCoordinator(self.dis, recorder, prec, drec, prefill, decode,
                                             self.kv_bytes_per_token)
        self._workers = prefill + decode
        return self._workers

    def make_router(self, seed: int):
        from servesim.cluster.routers import build_router
        from servesim.errors import ConfigError

        assert self.coordinator is not None, "call make_workers first"
        try:
            inner = build_router(self.cfg.router, seed, self.cfg.router_options, self.kv_index)
        except ValueError as exc:
            raise ConfigError(f"deployment.router_options: {exc}") from None
        return PrefillPoolRouter(inner, self.prefill.cfg.workers, self.coordinator)

    def describe(self) -> dict:
        d = self.dis
        return {
            "disaggregation": {
                "link_gbs": d.link_gbs, "link_latency_us": d.link_latency_us,
                "decode_router": d.decode_router, "kv_bytes_per_token": self.kv_bytes_per_token,
                "prefill_workers": self.prefill.cfg.workers, "decode_workers": self.decode.cfg.workers,
            },
            "total_gpus": self.total_gpus,
            "prefill": self.prefill.describe(),
            "decode": self.decode.describe(),
        }

    # What a Deployment offers besides the above is the prefill pool's (both pools serve the
    # same model; the summary and prediction.json describe the run by its first pool).
    arch = property(lambda self: self.prefill.arch)
    gpu = property(lambda self: self.prefill.gpu)
    weight_dtype = property(lambda self: self.prefill.weight_dtype)
    kv_dtype = property(lambda self: self.prefill.kv_dtype)
    memory = property(lambda self: self.prefill.memory)
    step_time = property(lambda self: self.prefill.step_time)
    engine_factory = property(lambda self: self.prefill.engine_factory)
    engine_settings = property(lambda self: self.prefill.engine_settings)
    perf = property(lambda self: self.prefill.perf)
    oracle = property(lambda self: self.prefill.oracle)
    gpus_per_worker = property(lambda self: self.prefill.gpus_per_worker)
    kv_capacity_tokens = property(lambda self: self.prefill.kv_capacity_tokens)
    frontend_params = property(lambda self: self.prefill.frontend_params)


def build_disaggregated(cfg: "Config", build_deployment: Callable[..., "Deployment"],
                        oracle=None) -> DisaggDeployment:
    """Resolve both pools as ordinary deployments (each with its own layout and engine), with
    ``build_deployment`` (cluster/deployment.py's, passed in so that this module does not
    import that one, which imports this one)."""
    dep = cfg.deployment
    dis = dep.disaggregation
    assert dis is not None
    pools = {}
    for name, pool in (("prefill", dis.prefill), ("decode", dis.decode)):
        update: dict[str, Any] = {"workers": pool.workers, "disaggregation": None}
        for key in ("tp", "ep", "attention_dp", "gpu", "engine"):
            v = getattr(pool, key)
            if v is not None:
                update[key] = v
        if name == "prefill":
            update["speculative"] = None  # a prefill worker never decodes
        sub = cfg.model_copy(update={"deployment": dep.model_copy(update=update)})
        pools[name] = build_deployment(sub, oracle)
    pre, dec = pools["prefill"], pools["decode"]
    if pre.arch.name != dec.arch.name:  # both pools serve deployment.model
        raise AssertionError("disaggregation: pools resolved to different models")
    kvb = KV_DTYPE_BYTES.get(dec.kv_dtype, 2.0)
    per_token = float(dec.arch.kv_bytes_per_token(kvb, 1))
    return DisaggDeployment(cfg=dep, dis=dis, prefill=pre, decode=dec, kv_bytes_per_token=per_token)
