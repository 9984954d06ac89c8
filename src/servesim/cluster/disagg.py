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
from typing import TYPE_CHECKING, Annotated, Any, Callable, Literal, Sequence, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from servesim.engines.sglang_options import SGLangOptions
from servesim.engines.trtllm_options import TRTLLMOptions
from servesim.engines.vllm_options import VLLMOptions
from servesim.metrics.recorder import RequestRecorder, Status
from servesim.sim.events import EventKind
from servesim.workload.request import Request, sequence_units

if TYPE_CHECKING:
    from servesim.cluster.deployment import Deployment
    from servesim.cluster.worker import Worker
    from servesim.config.schema import Config
    from servesim.sim.simulation import Simulation

_PoolEngine = Annotated[Union[SGLangOptions, VLLMOptions, TRTLLMOptions], Field(discriminator="name")]


class PoolConfig(BaseModel):
    """One pool of a disaggregated deployment; unset fields take ``deployment``'s value."""

    model_config = ConfigDict(extra="forbid")

    workers: int = Field(1, ge=1, description="workers in this pool")
    tp: int | None = Field(None, ge=1, description="tensor-parallel GPUs per worker (None: deployment.tp)")
    ep: int | None = Field(None, ge=1, description="expert-parallel GPUs per worker (None: deployment.ep)")
    attention_dp: int | None = Field(None, ge=1, description="attention-DP ranks per worker (None: deployment.attention_dp)")
    gpu: str | None = Field(None, description="GPU of this pool (None: deployment.gpu)")
    engine: _PoolEngine | None = Field(None, description="engine options of this pool (None: deployment.engine)")

    @field_validator("engine", mode="before")
    @classmethod
    def _engine_shorthand(cls, v: Any) -> Any:
        return {"name": v} if isinstance(v, str) else v


class DisaggregationConfig(BaseModel):
    """``deployment.disaggregation``: the two pools and the KV link between them."""

    model_config = ConfigDict(extra="forbid")

    prefill: PoolConfig = Field(default_factory=PoolConfig)
    decode: PoolConfig = Field(default_factory=PoolConfig)
    link_gbs: float = Field(50.0, gt=0, description="GB/s from one prefill worker to one decode worker "
                                                    "(e.g. 400 Gb/s RDMA = 50 GB/s)")
    link_latency_us: float = Field(20.0, ge=0, description="fixed latency per transfer, microseconds")
    decode_router: Literal["least_loaded", "round_robin", "kv_aware"] = Field(
        "least_loaded", description="how a prefilled request picks its decode worker")


# -- engines ----------------------------------------------------------------------------
class PrefillOnlyEngine:
    """A prefill worker's engine: each request runs as if it wanted one output token.

    Everything but :meth:`add_request` is the wrapped engine's.
    """

    def __init__(self, inner) -> None:
        self.__dict__["inner"] = inner

    def add_request(self, req: Request, now: float, kv_ready: int = 0) -> None:
        self.inner.add_request(req.replace(output_length=1), now)

    @property
    def terminated(self) -> list:
        return self.inner.terminated

    @terminated.setter
    def terminated(self, value: list) -> None:
        self.inner.terminated = value

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def held_prefix_tokens(engine, req: Request) -> int:
    """Prompt tokens ``engine`` already holds in its prefix cache (at least one is always sent)."""
    n = req.input_length - 1
    if n <= 0:
        return 0
    ranks = getattr(engine, "ranks", None)
    if ranks is not None:  # attention DP: the rank the placement rule would pick now
        engine = ranks[engine.rank_for(req)]
    tree = getattr(engine, "tree", None)
    if tree is not None:  # SGLang's radix cache
        return int(tree.match_prefix(sequence_units(req, n)).tokens)
    pool = getattr(engine, "pool", None)
    enabled = getattr(engine, "caching", getattr(engine, "reuse", False))
    if pool is None or not enabled:
        return 0
    from servesim.engines.vllm import extend_block_hashes

    bs = engine.bs
    cap = n // bs
    if cap <= 0:
        return 0
    hashes = extend_block_hashes(req, [], [], cap, bs)
    return int(pool.find_cached_prefix(hashes[:cap])) * bs


# -- recorders --------------------------------------------------------------------------
class _PrefillRecorder:
    """What prefill engines report: a finished one-token request is a handoff, not an end."""

    def __init__(self, rec: RequestRecorder) -> None:
        self.rec = rec
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

    def __getattr__(self, name: str):
        return getattr(self.rec, name)


class _DecodeRecorder:
    """What decode engines report; the first emission of a handed-off request is its decode start."""

    def __init__(self, rec: RequestRecorder) -> None:
        self.rec = rec
        self.awaiting = 0  # handed-off requests not yet admitted by their decode engine

    def emit(self, idx: np.ndarray, t: float, tokens_each=1) -> None:
        if self.awaiting and idx.size:
            col = self.rec.extra("decode_start_s")
            fresh = idx[np.isnan(col[idx])]
            if fresh.size:
                col[fresh] = t
                self.awaiting -= int(fresh.size)
        self.rec.emit(idx, t, tokens_each)

    def __getattr__(self, name: str):
        return getattr(self.rec, name)


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
        return snap.running + snap.waiting + len(getattr(eng, "ready", ())) + self.in_flight[d]

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

    def choose(self, req: Request, workers: Sequence["Worker"], now: float) -> int:
        self.coordinator.remember(req)
        return self.inner.choose(req, workers[: self.n], now)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


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
        from servesim.cluster.deployment import _publish_kv_events
        from servesim.cluster.kv_index import KVIndex
        from servesim.cluster.worker import Worker

        c = self.cfg
        needs_index = c.router == "kv_aware" or c.router_options.get("fallback") == "kv_aware"
        self.kv_index = KVIndex(c.kv_event_delay_s) if needs_index else None
        prec, drec = _PrefillRecorder(recorder), _DecodeRecorder(recorder)
        prefill, decode = [], []
        for i in range(self.prefill.cfg.workers):
            eng = self.prefill.engine_factory(i, prec)
            sinks = []
            if self.kv_index is not None:
                self.kv_index.hash_block_size = getattr(eng, "bs", self.kv_index.hash_block_size)
                sinks.append(self.kv_index.sink(i))
            if kv_event_log is not None:
                sinks.append(kv_event_log)
            if sinks:
                _publish_kv_events(eng, i, sinks)
            prefill.append(Worker(i, PrefillOnlyEngine(eng), self.prefill.step_time,
                                  self.prefill.gpus_per_worker, fast_forward))
        base = len(prefill)
        for j in range(self.decode.cfg.workers):
            wid = base + j
            eng = self.decode.engine_factory(wid, drec)
            if kv_event_log is not None:
                _publish_kv_events(eng, wid, [kv_event_log])
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

    def __getattr__(self, name: str):
        # Anything else (arch, gpu, perf, memory, ...) is the prefill pool's.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.prefill, name)


def build_disaggregated(cfg: "Config", oracle=None) -> DisaggDeployment:
    """Resolve both pools as ordinary deployments (each with its own layout and engine)."""
    from servesim.cluster.deployment import build_deployment

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
