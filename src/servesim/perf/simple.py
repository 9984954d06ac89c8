"""Simple step-time models: a constant per pass (tests) and an affine model of the pass."""

from __future__ import annotations

import numpy as np

from servesim.errors import ConfigError
from servesim.perf.plan import PassPlan


class FixedStepTime:
    """Every pass costs ``seconds``, whatever it computes."""

    def __init__(self, seconds: float) -> None:
        if not seconds > 0:
            raise ConfigError(f"perf.seconds must be > 0, found {seconds!r}")
        self.seconds = float(seconds)

    def pass_time(self, plan: PassPlan) -> float:
        return self.seconds

    def decode_stretch_times(self, decode_ctx: np.ndarray, steps: int) -> np.ndarray:
        return np.full(steps, self.seconds, dtype=np.float64)


class LinearStepTime:
    """Affine in the pass composition.

    ``t = base_s + per_prefill_token_s·Σnew + per_decode_request_s·n_decode·decode_tokens
    + per_context_token_s·(Σ decode ctx + Σ prefill cached) + per_prefill_attention_pair_s·Σ pairs``
    where a chunk's attention pairs are ``new × (cached + (new + 1)/2)`` (causal).
    """

    def __init__(
        self,
        base_s: float,
        per_prefill_token_s: float = 0.0,
        per_decode_request_s: float = 0.0,
        per_context_token_s: float = 0.0,
        per_prefill_attention_pair_s: float = 0.0,
    ) -> None:
        vals = dict(base_s=base_s, per_prefill_token_s=per_prefill_token_s,
                    per_decode_request_s=per_decode_request_s, per_context_token_s=per_context_token_s,
                    per_prefill_attention_pair_s=per_prefill_attention_pair_s)
        for k, v in vals.items():
            if v < 0:
                raise ConfigError(f"perf.{k} must be >= 0, found {v!r}")
        if base_s <= 0:
            raise ConfigError(f"perf.base_s must be > 0, found {base_s!r}")
        self.base_s = float(base_s)
        self.per_prefill_token_s = float(per_prefill_token_s)
        self.per_decode_request_s = float(per_decode_request_s)
        self.per_context_token_s = float(per_context_token_s)
        self.per_prefill_attention_pair_s = float(per_prefill_attention_pair_s)

    def _decode_part(self, n: int, decode_tokens: int, ctx_sum):
        return self.per_decode_request_s * (n * decode_tokens) + self.per_context_token_s * ctx_sum

    def pass_time(self, plan: PassPlan) -> float:
        t = self.base_s
        if plan.prefill_new.size:
            new = plan.prefill_new
            cached = plan.prefill_cached
            t += self.per_prefill_token_s * float(new.sum())
            t += self.per_context_token_s * float(cached.sum())
            if self.per_prefill_attention_pair_s:
                pairs = float(np.dot(new, cached) + (new * (new + 1)).sum() / 2.0)
                t += self.per_prefill_attention_pair_s * pairs
        n = plan.decode_ctx.size
        if n:
            t += self._decode_part(n, plan.decode_tokens, float(plan.decode_ctx.sum()))
        return t

    def decode_stretch_times(self, decode_ctx: np.ndarray, steps: int) -> np.ndarray:
        n = decode_ctx.size
        if n == 0:
            return np.full(steps, self.base_s)
        s0 = int(decode_ctx.sum())
        sums = (s0 + n * np.arange(steps, dtype=np.int64)).astype(np.float64)
        return self.base_s + self._decode_part(n, 1, sums)
