"""Vectorised sampling of the distributions declared in :mod:`servesim.workload.config`.

Everything here draws whole arrays from a :class:`numpy.random.Generator`, so a million
requests cost a handful of numpy calls rather than a million Python ones.  The draws
consume the generator in a fixed order, which is what makes a workload reproducible
for a seed.
"""

from __future__ import annotations

import numpy as np

from .request import MAX_TOKENS
from .config import (
    ArrivalProcess,
    _DurationClip,
    _Exponential,
    _Fixed,
    _LengthClip,
    _Lognormal,
    _Normal,
    _Uniform,
)


def _raw(dist: object, rng: np.random.Generator, n: int, integer_uniform: bool) -> np.ndarray:
    """Unclipped float draws of ``dist`` (uniform lengths are already integers)."""
    if isinstance(dist, _Fixed):
        return np.full(n, float(dist.value))
    if isinstance(dist, _Uniform):
        if integer_uniform:
            low, high = int(round(dist.low)), int(round(dist.high))
            return rng.integers(low, high + 1, size=n).astype(np.float64)
        return rng.uniform(dist.low, dist.high, size=n)
    if isinstance(dist, _Normal):
        return rng.normal(dist.mean, dist.std, size=n)
    if isinstance(dist, _Lognormal):
        return rng.lognormal(dist.mu, dist.sigma, size=n)
    if isinstance(dist, _Exponential):
        return rng.exponential(dist.mean, size=n)
    raise TypeError(f"not a distribution: {dist!r}")  # pragma: no cover - config guarantees


def sample_lengths(dist: _LengthClip, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` token counts (int64): draws rounded to the nearest integer, clipped to [min, max]
    (``max`` defaults to :data:`MAX_TOKENS`: a wide lognormal's tail must not overflow int64)."""
    values = np.rint(_raw(dist, rng, n, integer_uniform=True))
    upper = dist.max if dist.max is not None else MAX_TOKENS
    return np.clip(values, dist.min, upper).astype(np.int64)


def sample_durations(dist: _DurationClip, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` durations in seconds (float64), clipped to [min, max]."""
    values = _raw(dist, rng, n, integer_uniform=False)
    upper = dist.max if dist.max is not None else np.inf
    return np.clip(values, dist.min, upper)


def interarrival_gaps(arrival: ArrivalProcess, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` gaps (seconds) between consecutive arrivals, mean ``1/rate``."""
    mean_gap = 1.0 / arrival.rate
    if arrival.process == "constant":
        return np.full(n, mean_gap)
    if arrival.process == "poisson":
        return rng.exponential(mean_gap, size=n)
    # Gamma with coefficient of variation b: shape 1/b^2, scale mean*b^2.
    cv2 = arrival.burstiness**2
    return rng.gamma(1.0 / cv2, mean_gap * cv2, size=n)
