"""Summary statistics over plain and weighted samples.

Inter-token gaps are stored as (value, count) pairs rather than one float per token, so
percentiles are computed on weighted samples; they equal what ``numpy.percentile``
(linear interpolation) gives on the expanded samples.
"""

from __future__ import annotations

import math

import numpy as np

PERCENTILES = (50, 90, 95, 99)


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """Percentile ``q`` (0..100) of ``values`` repeated ``weights`` times, linear interpolation.

    ``values`` must be sorted ascending and ``weights`` positive integers.
    """
    cum = np.cumsum(weights)
    total = int(cum[-1])
    pos = q / 100.0 * (total - 1)
    lo = math.floor(pos)
    frac = pos - lo
    i_lo = int(np.searchsorted(cum, lo, side="right"))
    v_lo = float(values[i_lo])
    if frac == 0.0:
        return v_lo
    i_hi = int(np.searchsorted(cum, lo + 1, side="right"))
    return v_lo + frac * (float(values[i_hi]) - v_lo)


def describe(values: np.ndarray, weights: np.ndarray | None = None, scale: float = 1.0) -> dict[str, float | int | None]:
    """Mean, std, min, max and percentiles of a sample (optionally weighted), times ``scale``.

    An empty sample gives ``None`` for every statistic, so reports show "n/a" rather than
    a misleading zero.
    """
    keys = ["count", "mean", "std", "min", "max"] + [f"p{p}" for p in PERCENTILES]
    if values.size == 0 or (weights is not None and int(weights.sum()) == 0):
        out: dict[str, float | int | None] = {k: None for k in keys}
        out["count"] = 0
        return out
    if weights is None:
        v = np.asarray(values, dtype=np.float64) * scale
        out = {
            "count": int(v.size),
            "mean": float(v.mean()),
            "std": float(v.std()),
            "min": float(v.min()),
            "max": float(v.max()),
        }
        for p, val in zip(PERCENTILES, np.percentile(v, PERCENTILES)):
            out[f"p{p}"] = float(val)
        return out
    order = np.argsort(values, kind="stable")
    v = np.asarray(values, dtype=np.float64)[order] * scale
    w = np.asarray(weights, dtype=np.int64)[order]
    keep = w > 0
    v, w = v[keep], w[keep]
    total = int(w.sum())
    mean = float(np.dot(v, w) / total)
    var = float(np.dot((v - mean) ** 2, w) / total)
    out = {"count": total, "mean": mean, "std": math.sqrt(max(var, 0.0)), "min": float(v[0]), "max": float(v[-1])}
    for p in PERCENTILES:
        out[f"p{p}"] = weighted_percentile(v, w, p)
    return out


class WeightedSamples:
    """Accumulates (value, count) pairs in chunks; cheap to append, merged at the end."""

    __slots__ = ("_values", "_weights")

    def __init__(self) -> None:
        self._values: list[np.ndarray] = []
        self._weights: list[np.ndarray] = []

    def add(self, values: np.ndarray, weights: np.ndarray) -> None:
        if values.size:
            self._values.append(values)
            self._weights.append(weights)

    def add_one(self, value: float, weight: int) -> None:
        if weight > 0:
            self._values.append(np.array([value]))
            self._weights.append(np.array([weight], dtype=np.int64))

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if not self._values:
            return np.zeros(0), np.zeros(0, dtype=np.int64)
        v = np.concatenate(self._values)
        w = np.concatenate(self._weights).astype(np.int64)
        # Compact: identical values merge, keeping memory proportional to distinct gaps.
        uv, inv = np.unique(v, return_inverse=True)
        uw = np.bincount(inv, weights=w).astype(np.int64)
        self._values, self._weights = [uv], [uw]
        return uv, uw
