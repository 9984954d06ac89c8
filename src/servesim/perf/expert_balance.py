"""How unevenly routed tokens load expert-parallel ranks: the MoE statistics the analytic model prices.

With expert parallelism a MoE layer waits for the rank that touches the most of its local
experts; :func:`expected_busiest_touched` gives that count's expectation under uniform routing
(``perf/analytic.py`` memoizes it per pass size, so it is off the per-pass hot path).
"""

from __future__ import annotations

import math

import numpy as np


def _binomial_cdf(n: int, frac: float) -> np.ndarray:
    """P(X <= j) for j = 0..n of X ~ Binomial(n, frac), 0 < frac < 1 (log space: no underflow)."""
    j = np.arange(1, n + 1, dtype=np.float64)
    log_comb = np.concatenate(([0.0], np.cumsum(np.log((n - j + 1) / j))))
    k = np.arange(n + 1, dtype=np.float64)
    pmf = np.exp(log_comb + k * math.log(frac) + (n - k) * math.log1p(-frac))
    return np.minimum(np.cumsum(pmf), 1.0)


def expected_busiest_touched(experts: int, frac: float, ranks: int, per_token: int = 1) -> float:
    """Expected largest number of touched experts on any of ``ranks`` expert-parallel ranks.

    ``experts`` are spread as evenly as they go (``experts % ranks`` ranks hold one more) and
    each is touched with probability ``frac``, independently (uniform routing), so a rank's
    count is Binomial(its experts, frac) and the maximum's expectation is
    ``sum_j (1 - P(max < j))`` with ``P(max <= j)`` the product of the ranks' CDFs.  One rank:
    ``experts * frac``.  Independence understates the busiest rank when a rank holds one or two
    experts; a token routes to ``per_token`` distinct experts, so some rank holds at least
    ``ceil(per_token / ranks)`` of them, the floor applied here.
    """
    frac = min(max(frac, 0.0), 1.0)
    if ranks <= 1 or frac <= 0.0:
        return experts * frac
    small, extra = divmod(experts, ranks)
    big = small + (1 if extra else 0)
    if frac >= 1.0:
        return float(big)
    cdf_max = _binomial_cdf(big, frac) ** (extra if extra else ranks)
    if extra and small:
        cdf_max[:small + 1] *= _binomial_cdf(small, frac) ** (ranks - extra)
    return max(float(np.sum(1.0 - cdf_max[:-1])), float(-(-min(per_token, experts) // ranks)))
