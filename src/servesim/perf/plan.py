"""The record of one forward pass, as a step-time model sees it.

A pass is described by its real per-request composition, never by an average request:
every prefill chunk with its own number of new tokens and of tokens already in KV that it
attends to, and every decoding request with its own context length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(slots=True)
class PassPlan:
    """What one forward pass computes.

    ``prefill_new[i]`` new prompt tokens of chunk ``i`` and ``prefill_cached[i]`` tokens of
    that request already in KV (cached prefix plus earlier chunks); ``decode_ctx[j]`` the
    KV length decoding request ``j`` attends to, its new token included.  ``decode_tokens``
    is the number of tokens each decoding request verifies this pass (1 without
    speculative decoding).  ``requests`` holds engine-private bookkeeping.
    """

    prefill_new: np.ndarray = field(default_factory=lambda: _EMPTY)
    prefill_cached: np.ndarray = field(default_factory=lambda: _EMPTY)
    decode_ctx: np.ndarray = field(default_factory=lambda: _EMPTY)
    decode_tokens: int = 1
    #: KV bytes loaded from a host tier before the pass can run (0 without one).
    host_load_bytes: float = 0.0
    #: Seconds the host-tier load takes over the host link (set by the engine, which knows
    #: the link and the bytes); the worker adds it to the pass, or with
    #: ``host_load_overlap`` (layer-wise loading during compute) takes max(compute, load).
    host_load_s: float = 0.0
    host_load_overlap: bool = False
    requests: object = None

    @property
    def num_prefill_tokens(self) -> int:
        return int(self.prefill_new.sum()) if self.prefill_new.size else 0

    @property
    def num_decode(self) -> int:
        return int(self.decode_ctx.size)

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode * self.decode_tokens

    @property
    def is_decode_only(self) -> bool:
        return self.prefill_new.size == 0


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


def stretch_by_steps(model: StepTimeModel, decode_ctx: np.ndarray, steps: int) -> np.ndarray:
    """Reference implementation of ``decode_stretch_times``: one pricing per pass."""
    out = np.empty(steps, dtype=np.float64)
    for s in range(steps):
        out[s] = model.pass_time(PassPlan(decode_ctx=decode_ctx + s))
    return out
