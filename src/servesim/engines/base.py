"""What every engine model offers the simulation loop.

An engine owns one worker's scheduler and KV cache.  The loop asks it for the next pass
(:meth:`Engine.schedule`), prices the pass with the step-time model, and when the pass
ends calls :meth:`Engine.complete`, which emits tokens and finishes requests.  Decision
(schedule) and commit (complete) are separate, as in vLLM's engine core: a pass's effects
become visible only when it ends.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from servesim.metrics.recorder import RequestRecorder, Status
from servesim.perf.plan import PassPlan
from servesim.workload.request import Request


@dataclass(slots=True)
class EngineLimits:
    """Deployment facts an engine needs besides its own options."""

    kv_capacity_tokens: int
    context_length: int
    #: KV bytes of one token on one GPU (the memory model's figure); 0 when unknown.
    kv_bytes_per_token: float = 0.0
    #: GPUs a token's KV is split over (tensor parallelism); each loads its share in parallel.
    kv_shards: int = 1
    #: The GPU's name, for defaults that depend on it (the host link of a host KV tier).
    gpu_name: str = ""


@dataclass(slots=True)
class EngineSnapshot:
    """Published state of a worker, for time series and routers."""

    running: int
    waiting: int
    kv_used_tokens: int
    kv_capacity_tokens: int
    prompt_tokens: int
    cached_prompt_tokens: int
    outstanding_tokens: int


class Engine:
    """One worker's scheduler and KV cache.

    Subclasses implement the five verbs that raise NotImplementedError here.  (Not an ABC:
    engines compiled from source, engines/base.pxd, are extension types, which cannot
    derive from one.)
    """

    name = "engine"  # class attributes, not annotated: a compiled class warns of class-level annotations
    #: Speculative decoding (engines/speculative.py): engines that model it set
    #: ``supports_speculative``; ``spec`` (a SpecDecoder) is attached when configured.
    supports_speculative = False

    def __init__(self, worker_id: int, recorder: RequestRecorder, limits: EngineLimits) -> None:
        self.worker_id = worker_id
        self.rec = recorder
        self.limits = limits
        #: Requests that reached a terminal state in the last :meth:`complete` or
        #: :meth:`add_request` call, drained by the loop (sessions, closed loops).
        self.terminated: list[Request] = []
        self.prompt_tokens = 0
        self.cached_prompt_tokens = 0
        self.spec = None

    # -- the loop's verbs --------------------------------------------------------------
    def add_request(self, req: Request, now: float, kv_ready: int = 0) -> None:
        """A request arrives at this worker (it may be rejected at once).

        ``kv_ready`` > 0 (disaggregated decode): the prompt's KV arrives computed and its
        first token exists; the engine reserves the KV as for an admission, runs no
        prefill, and emits the first token when it admits the request.
        """
        raise NotImplementedError

    def has_work(self) -> bool:
        """Whether any request is waiting or running."""
        raise NotImplementedError

    def schedule(self, now: float) -> PassPlan | None:
        """Decide the next pass, or ``None`` when nothing can run until something changes."""
        raise NotImplementedError

    def complete(self, plan: PassPlan, end: float) -> None:
        """Commit the effects of ``plan``, which ended at ``end``."""
        raise NotImplementedError

    def snapshot(self) -> EngineSnapshot:
        """Current queue and cache state."""
        raise NotImplementedError

    def complete_stretch(self, plan: PassPlan, ends) -> None:
        """Commit ``len(ends)`` identical decode passes at once, the first being ``plan``
        (``ends``: each pass's end time).  Called only after :meth:`decode_stretch_limit`
        promised that many; must equal committing them one by one."""
        raise NotImplementedError(f"{type(self).__name__} allows no decode stretch above 1 pass")

    def check_invariants(self) -> None:
        """Assert KV conservation and the engine's own guarantees (tests call it after passes)."""

    def abort(self, index: int, now: float, reason: str = "cancelled by the client") -> bool:
        """Drop request ``index`` (its :attr:`Request.index`) because its client went away.

        Called between passes only (no pass of this engine in flight: the simulation defers an
        abort that comes mid-pass to the pass end, as the real engines handle aborts between
        steps).  A waiting request leaves the queue; a running or partly prefilled one leaves
        the batch and frees its KV the way the engine frees a finished request's (cached
        prefix blocks stay cached, unlocked and evictable).  The request ends
        :attr:`Status.CANCELLED` at ``now`` and joins :attr:`terminated`.  Returns False when
        the engine does not hold it (it already ended): nothing changes then.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot abort a request")

    def abort_all(self, now: float, reason: str) -> None:
        """End of simulation: requests still here become unfinished (the recorder does it)."""

    # -- what workers, routers, disaggregation and attention DP read -------------------------
    def kv_cache(self):
        """The KV cache that publishes this engine's KV events (its ``on_event`` sink and
        ``now`` clock): SGLang's radix cache, or the block pool of vLLM and TensorRT-LLM."""
        raise NotImplementedError

    def engine_ranks(self) -> list:
        """The engines that own a KV cache: this one, or each attention-DP rank."""
        return [self]

    def kv_block_size(self) -> int | None:
        """Tokens per hashed KV block, for a KV index of block hashes; None when the cache
        publishes token ranges (a radix cache), so that the index keeps its own size."""
        return None

    def held_prefix_tokens(self, req: Request) -> int:
        """Prompt tokens of ``req`` this engine already holds in its prefix cache (at most
        ``input_length - 1``: at least one token is always computed or sent)."""
        return 0

    def transfers_waiting(self) -> int:
        """Disaggregated decode: requests whose KV arrived and that await admission."""
        return 0

    def queue_counts(self) -> tuple[int, int]:
        """(waiting, running) requests, as the engine's load reports count them."""
        snap = self.snapshot()
        return snap.waiting, snap.running

    # -- what the workload shares ---------------------------------------------------------
    def wants_shared_block_ids(self) -> bool:
        """Whether :meth:`use_shared_block_ids` would speed this engine up (the workload's
        shared ids cost a pass over it, so the loop asks first)."""
        return False

    def use_shared_block_ids(self, shared: AbstractSet[int]) -> None:
        """``shared``: every block id that more than one request of the workload lists
        (``workload/sharing.py``).  A block whose id is not among them, nor any block after
        it in its sequence, can be looked up by no other request."""

    # -- fast-forward of decode-only stretches ---------------------------------------
    def input_lag_passes(self) -> int:
        """Passes after the one in flight that new input cannot change: 0, unless the engine
        chooses its next pass before the current one runs (SGLang's overlap loop)."""
        return 0

    def decode_stretch_limit(self) -> int:
        """How many decode-only passes from now are guaranteed identical in composition.

        The default, 1, disables fast-forward; engines override it where they can prove
        that nothing is admitted, finishes, is retracted or changes pages within the stretch.
        """
        return 1

    # -- helpers for subclasses --------------------------------------------------------
    def _reject(self, req: Request, now: float, reason: str) -> None:
        self.rec.finished(req.index, now, Status.REJECTED, reason)
        self.terminated.append(req)

    def _cancel(self, req: Request, now: float, reason: str) -> None:
        self.rec.finished(req.index, now, Status.CANCELLED, reason)
        self.terminated.append(req)

    def _finish(self, req: Request, now: float) -> None:
        self.rec.finished(req.index, now, Status.COMPLETED)
        self.terminated.append(req)
