"""Speculative decoding: draft acceptance, and the price of a draft-and-verify pass.

A speculative decode pass proposes ``k`` draft tokens per request (MTP or EAGLE heads run
``k`` small autoregressive steps; n-gram prompt lookup copies them from the prompt), then
the target model verifies ``k + 1`` positions per request in one forward pass.  A request
keeps the longest accepted run of drafts plus the target's own token: between 1 and
``k + 1`` tokens per pass.

Acceptance model: draft position ``i`` (1-based) is accepted with probability ``p_i``
given that positions ``1 .. i-1`` were, so the accepted length ``L = 1 + Σ_i Π_{j<=i}
1[U_j < p_j]`` and ``E[L] = 1 + Σ_i Π_{j<=i} p_j``.  The rates come from

* ``acceptance_rates: [p_1, ..., p_k]`` (per position, as EAGLE and MTP papers report), or
* ``mean_accepted_length: m`` (the figure engines log; 1 ≤ m ≤ k + 1): one rate ``p`` at
  every position, solved from ``1 + p + p² + ... + p^k = m``, or
* ``acceptance_rate: p`` (the same rate at every position; n-gram's fixed acceptance).

Accepted lengths are drawn per request per pass from a generator seeded with the run's
seed and the worker id, so runs are reproducible.

Pricing (:class:`SpeculativeStepTime`): the engine's plan carries ``decode_tokens = k + 1``
(the verification), which the step-time model prices as ``k + 1`` query tokens per
decoding request; the draft cost is added on top: ``k × draft_cost_ratio ×`` the price of
a plain one-token decode pass of the same requests (each draft step is a small forward
pass over the batch).  n-gram lookup runs on the CPU: its ratio defaults to 0.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from servesim.perf.plan import PassPlan, StepTimeModel, plan_stretch_times

#: Default ``draft_cost_ratio`` per method: one draft step costs this fraction of a plain
#: decode pass.  An MTP or EAGLE head is one transformer layer plus the LM head.
DEFAULT_DRAFT_COST_RATIO = {"mtp": 0.08, "eagle": 0.08, "ngram": 0.0}
#: Default per-position acceptance of n-gram prompt lookup when nothing is given.
DEFAULT_NGRAM_ACCEPTANCE = 0.3


class SpeculativeConfig(BaseModel):
    """``deployment.speculative``: draft method, draft tokens and acceptance."""

    model_config = ConfigDict(extra="forbid")

    method: Literal["mtp", "eagle", "ngram"] = Field("mtp", description="draft source")
    draft_tokens: int = Field(3, ge=1, le=32, description="k: draft tokens proposed per request per pass")
    mean_accepted_length: float | None = Field(
        None, ge=1.0, description="mean tokens kept per request per pass (1 ≤ m ≤ k + 1), bonus token included")
    acceptance_rates: list[float] | None = Field(
        None, description="per-position conditional acceptance rates p_1..p_k, each in [0, 1]")
    acceptance_rate: float | None = Field(
        None, ge=0.0, le=1.0, description="one acceptance rate for every position (n-gram lookup's fixed rate)")
    draft_cost_ratio: float | None = Field(
        None, ge=0.0, description="one draft step's cost as a fraction of a plain decode pass; "
                                  "None: 0.08 for mtp/eagle, 0 for ngram")

    @model_validator(mode="after")
    def _check(self) -> "SpeculativeConfig":
        given = [x is not None for x in (self.mean_accepted_length, self.acceptance_rates, self.acceptance_rate)]
        if sum(given) > 1:
            raise ValueError("give only one of mean_accepted_length, acceptance_rates, acceptance_rate")
        if sum(given) == 0 and self.method != "ngram":
            raise ValueError(f"method {self.method} needs mean_accepted_length, acceptance_rates or acceptance_rate")
        k = self.draft_tokens
        if self.mean_accepted_length is not None and self.mean_accepted_length > k + 1:
            raise ValueError(f"mean_accepted_length {self.mean_accepted_length} exceeds draft_tokens + 1 = {k + 1}")
        if self.acceptance_rates is not None:
            if len(self.acceptance_rates) != k:
                raise ValueError(f"acceptance_rates has {len(self.acceptance_rates)} entries; "
                                 f"expected draft_tokens = {k}")
            if any(not 0.0 <= p <= 1.0 for p in self.acceptance_rates):
                raise ValueError("acceptance_rates must each lie in [0, 1]")
        return self

    def rates(self) -> np.ndarray:
        """Per-position conditional acceptance rates p_1..p_k."""
        k = self.draft_tokens
        if self.acceptance_rates is not None:
            return np.asarray(self.acceptance_rates, dtype=np.float64)
        if self.acceptance_rate is not None:
            return np.full(k, self.acceptance_rate)
        if self.mean_accepted_length is not None:
            return np.full(k, rate_for_mean_length(self.mean_accepted_length, k))
        return np.full(k, DEFAULT_NGRAM_ACCEPTANCE)

    @property
    def cost_ratio(self) -> float:
        if self.draft_cost_ratio is not None:
            return self.draft_cost_ratio
        return DEFAULT_DRAFT_COST_RATIO[self.method]


def expected_length(rates: np.ndarray) -> float:
    """E[L] = 1 + Σ_i Π_{j<=i} p_j."""
    return 1.0 + float(np.cumprod(rates).sum()) if len(rates) else 1.0


def rate_for_mean_length(m: float, k: int) -> float:
    """The constant per-position rate p with 1 + p + ... + p^k = m (bisection; monotone in p)."""
    if m <= 1.0:
        return 0.0
    if m >= k + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if expected_length(np.full(k, mid)) < m:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


class SpecDecoder:
    """One worker's draft acceptance: draws accepted lengths per request per pass."""

    def __init__(self, cfg: SpeculativeConfig, seed: int, worker_id: int) -> None:
        self.cfg = cfg
        self.k = cfg.draft_tokens
        #: Tokens each decoding request verifies per pass (the plan's ``decode_tokens``).
        self.tokens = self.k + 1
        self._rates = cfg.rates()
        self._rng = np.random.default_rng([int(seed), int(worker_id), 0x5BEC])

    @property
    def mean_length(self) -> float:
        return expected_length(self._rates)

    def draw(self, n: int) -> np.ndarray:
        """Accepted tokens (1 .. k+1) for ``n`` requests of one pass, in batch order."""
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        ok = self._rng.random((n, self.k)) < self._rates
        return 1 + np.cumprod(ok, axis=1).sum(axis=1).astype(np.int64)


class SpeculativeStepTime:
    """A step-time model plus the draft cost of speculative passes.

    A pass whose plan verifies more than one token per decoding request pays, besides the
    verification the inner model prices, ``k × ratio ×`` a plain decode pass of its
    decoding requests.  It offers the step-time methods the worker calls and nothing else:
    the wrapped model's own diagnostics are read on :attr:`inner`.  It has no fused
    ``decode_stretch_ends`` or ``stretch_pricer`` (speculation turns fast-forward off).
    """

    def __init__(self, inner: StepTimeModel, cfg: SpeculativeConfig) -> None:
        self.inner = inner
        self.k = cfg.draft_tokens
        self.ratio = cfg.cost_ratio

    def draft_time(self, plan: PassPlan) -> float:
        if plan.decode_tokens <= 1 or plan.decode_ctx.size == 0 or self.ratio == 0.0:
            return 0.0
        return self.k * self.ratio * self.inner.pass_time(plan.decode_part())

    def pass_time(self, plan: PassPlan) -> float:
        return self.inner.pass_time(plan) + self.draft_time(plan)

    def decode_stretch_times(self, decode_ctx: np.ndarray, steps: int) -> np.ndarray:
        # Stretches are plain one-token decode passes (speculation turns fast-forward off).
        return self.inner.decode_stretch_times(decode_ctx, steps)

    def rank_stretch_times(self, plan: PassPlan, steps: int) -> np.ndarray:
        return plan_stretch_times(self.inner, plan, steps)  # attention-DP stretches, plain decode too


def wrap_step_time(model: StepTimeModel, cfg: SpeculativeConfig | None) -> StepTimeModel:
    """The step-time model with draft costs when speculative decoding is configured."""
    return model if cfg is None else SpeculativeStepTime(model, cfg)


def attach_speculative(engine, cfg: SpeculativeConfig, seed: int, worker_id: int) -> None:
    """Give ``engine`` its draft sampler; engines that do not model speculation refuse."""
    if not engine.supports_speculative:
        from servesim.errors import ConfigError

        raise ConfigError(f"deployment.speculative: not modelled for engine {engine.name!r} yet "
                          "(supported: sglang, vllm, trtllm)")
    engine.spec = SpecDecoder(cfg, seed, worker_id)
