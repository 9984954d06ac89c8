"""The record of one forward pass, as a step-time model sees it.

A pass is described by its real per-request composition, never by an average request:
every prefill chunk with its own number of new tokens and of tokens already in KV that it
attends to, and every decoding request with its own context length.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

_EMPTY = np.zeros(0, dtype=np.int64)


class PassPlan:
    """What one forward pass computes.

    ``prefill_new[i]`` new prompt tokens of chunk ``i`` and ``prefill_cached[i]`` tokens of
    that request already in KV (cached prefix plus earlier chunks); ``decode_ctx[j]`` the
    KV length decoding request ``j`` attends to, its new token included.  ``decode_tokens``
    is the number of tokens each decoding request verifies this pass (1 without
    speculative decoding).  ``requests`` holds engine-private bookkeeping.

    (A plain class, not a dataclass: perf/plan.pxd types it when the module is compiled.)
    """

    __slots__ = ("prefill_new", "prefill_cached", "decode_ctx", "decode_tokens", "host_load_s",
                 "host_load_overlap", "requests", "ranks")

    def __init__(self, prefill_new: np.ndarray = _EMPTY, prefill_cached: np.ndarray = _EMPTY,
                 decode_ctx: np.ndarray = _EMPTY, decode_tokens: int = 1, host_load_s: float = 0.0,
                 host_load_overlap: bool = False, requests: object = None,
                 ranks: "tuple[PassPlan | None, ...] | None" = None) -> None:
        self.prefill_new = prefill_new
        self.prefill_cached = prefill_cached
        self.decode_ctx = decode_ctx
        self.decode_tokens = decode_tokens
        #: Seconds the host-tier load takes over the host link (set by the engine, which knows
        #: the link and the bytes); the worker adds it to the pass, or with
        #: ``host_load_overlap`` (layer-wise loading during compute) takes max(compute, load).
        self.host_load_s = host_load_s
        self.host_load_overlap = host_load_overlap
        self.requests = requests
        #: Attention data parallelism: one sub-plan per attention rank (``None`` for a rank with
        #: nothing to compute, which still joins the pass).  The arrays above then hold the
        #: union of the ranks' compositions, in rank order; see :func:`rank_union`.
        self.ranks = ranks

    def __repr__(self) -> str:
        return (f"PassPlan(prefill_new={self.prefill_new!r}, prefill_cached={self.prefill_cached!r}, "
                f"decode_ctx={self.decode_ctx!r}, decode_tokens={self.decode_tokens!r}, "
                f"host_load_s={self.host_load_s!r}, ranks={self.ranks!r})")

    @property
    def num_prefill_tokens(self) -> int:
        # A pass has a few chunks: summing Python ints beats ndarray.sum's fixed cost.
        return sum(self.prefill_new.tolist()) if self.prefill_new.size else 0

    @property
    def num_decode(self) -> int:
        return int(self.decode_ctx.size)

    @property
    def num_tokens(self) -> int:
        return self.token_count()

    @property
    def is_decode_only(self) -> bool:
        return self.decode_only()

    # The worker asks these once or twice per pass: as methods, a compiled caller holding a
    # typed plan calls them in C, where a property goes through Python's attribute lookup.
    def token_count(self) -> int:
        """:attr:`num_tokens`: prefill tokens plus ``decode_tokens`` per decoding request."""
        n = len(self.decode_ctx) * self.decode_tokens
        return n + sum(self.prefill_new.tolist()) if len(self.prefill_new) else n

    def decode_only(self) -> bool:
        """:attr:`is_decode_only`: no prefill chunk in the pass."""
        return len(self.prefill_new) == 0

    def decode_part(self) -> "PassPlan":
        """The pass's decoding requests alone, one token each (per-rank split kept)."""
        ranks = None
        if self.ranks is not None:
            ranks = tuple(None if r is None or not r.decode_ctx.size else r.decode_part() for r in self.ranks)
        return PassPlan(decode_ctx=self.decode_ctx, ranks=ranks)

    def shifted(self, s: int) -> "PassPlan":
        """The same decode-only pass ``s`` passes later: every context ``s`` tokens longer."""
        ranks = None
        if self.ranks is not None:
            ranks = tuple(None if r is None else r.shifted(s) for r in self.ranks)
        return PassPlan(decode_ctx=self.decode_ctx + s, decode_tokens=self.decode_tokens, ranks=ranks)


@runtime_checkable
class StepTimeModel(Protocol):
    """Prices a forward pass in seconds from its composition."""

    def pass_time(self, plan: PassPlan) -> float:
        """Seconds the pass takes on one worker (all its GPUs together)."""
        ...

    def decode_stretch_times(self, decode_ctx: np.ndarray, steps: int) -> np.ndarray:
        """Durations of ``steps`` consecutive decode-only passes of the same requests.

        In pass ``s`` (0-based) request ``j`` attends to ``decode_ctx[j] + s`` tokens.
        Must equal calling :meth:`pass_time` pass by pass; models may vectorise it.
        """
        ...


def ends_from_durations(durations: np.ndarray, now: float) -> np.ndarray:
    """Pass end times from ``now`` (in place: ``durations`` is consumed)."""
    ends = durations.cumsum()  # the array method: np.cumsum's wrapper costs more than a short sum
    ends += now
    return ends


def plan_stretch_ends(model: StepTimeModel, plan: PassPlan, steps: int, now: float) -> np.ndarray:
    """End times of the ``steps`` passes of :func:`plan_stretch_times` starting at ``now``.

    Models that define ``decode_stretch_ends`` (an optional method, looked up on the class)
    return them in one call, equal to ``durations.cumsum() + now`` operation for operation.
    """
    fused = getattr(type(model), "decode_stretch_ends", None)
    if plan.ranks is None and fused is not None:
        return fused(model, plan.decode_ctx, steps, now)
    return ends_from_durations(plan_stretch_times(model, plan, steps), now)


def stretch_pricer(model: StepTimeModel):
    """A callable ``(decode_ctx, steps, now) -> ends`` equal to :func:`plan_stretch_ends` for a
    plan without attention-DP ranks, prepared once per model; None if the model has none.

    A worker prices thousands of stretches through one model: the prepared callable reads the
    model's constants once instead of going through its methods each time.
    """
    make = getattr(type(model), "stretch_pricer", None)
    return make(model) if make is not None else None


def stretch_by_steps(model: StepTimeModel, decode_ctx: np.ndarray, steps: int) -> np.ndarray:
    """Reference implementation of ``decode_stretch_times``: one pricing per pass."""
    out = np.empty(steps, dtype=np.float64)
    for s in range(steps):
        out[s] = model.pass_time(PassPlan(decode_ctx=decode_ctx + s))
    return out


def rank_union(ranks: tuple[PassPlan | None, ...], requests: object = None) -> PassPlan:
    """One pass of all attention-DP ranks: the union composition, with the ranks kept.

    A step-time model that knows about ranks prices the attention of each rank and takes
    the slowest (:meth:`servesim.perf.analytic.AnalyticStepTime.rank_pass_time`); any other
    model prices the union as one batch.  Host-tier loads run on each rank's own link in
    parallel: the pass waits for the longest.
    """
    live = [r for r in ranks if r is not None]

    def cat(name: str) -> np.ndarray:
        parts = [getattr(r, name) for r in live if getattr(r, name).size]
        if not parts:
            return _EMPTY
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    dtok = max((r.decode_tokens for r in live if r.decode_ctx.size), default=1)
    loads = [r for r in live if r.host_load_s]
    slow = max(loads, key=lambda r: r.host_load_s) if loads else None
    return PassPlan(prefill_new=cat("prefill_new"), prefill_cached=cat("prefill_cached"),
                    decode_ctx=cat("decode_ctx"), decode_tokens=dtok,
                    host_load_s=slow.host_load_s if slow else 0.0,
                    host_load_overlap=slow.host_load_overlap if slow else False,
                    requests=requests, ranks=tuple(ranks))


def plan_stretch_times(model: StepTimeModel, plan: PassPlan, steps: int) -> np.ndarray:
    """Durations of ``steps`` decode-only passes starting with ``plan`` (the worker's fast path).

    A plan without ranks uses the model's ``decode_stretch_times``.  An attention-DP plan
    uses the model's ``rank_stretch_times`` when its class defines one (vectorised, equal
    to pricing pass by pass), else prices every pass with ``pass_time`` (exact for any model).
    """
    if plan.ranks is None:
        return model.decode_stretch_times(plan.decode_ctx, steps)
    if getattr(type(model), "rank_stretch_times", None) is not None:
        return model.rank_stretch_times(plan, steps)
    out = np.empty(steps, dtype=np.float64)
    for s in range(steps):
        out[s] = model.pass_time(plan.shifted(s))
    return out
