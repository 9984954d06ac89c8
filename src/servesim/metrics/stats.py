"""Summary statistics over plain and weighted samples.

Inter-token gaps are stored as (value, count) pairs rather than one float per token, so
percentiles are computed on weighted samples; they equal what ``numpy.percentile``
(linear interpolation) gives on the expanded samples.
"""

from __future__ import annotations

import math

import numpy as np

PERCENTILES = (50, 90, 95, 99)


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float,
                        cum: np.ndarray | None = None) -> float:
    """Percentile ``q`` (0..100) of ``values`` repeated ``weights`` times, linear interpolation.

    ``values`` must be sorted ascending and ``weights`` positive integers; ``cum``, their
    cumulative sum, may be passed when several percentiles of one sample are wanted.
    """
    if cum is None:
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
    # A weighted sample can hold millions of pairs (every inter-token gap of a long run), so
    # this path copies as little as it can: no sort when the values come sorted (as
    # WeightedSamples.arrays gives them), no filtering when every weight is positive, and
    # one scaled copy that ends as the squared deviations.
    v = np.asarray(values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.int64)
    if not _is_sorted(v):
        order = np.argsort(v, kind="stable")
        v, w = v[order], w[order]
        del order
    keep = w > 0
    if not keep.all():
        v, w = v[keep], w[keep]
    del keep
    v = v * scale
    total = int(w.sum())
    out = {"count": total, "mean": _weighted_sum(v, w) / total, "std": 0.0, "min": float(v[0]), "max": float(v[-1])}
    cum = np.cumsum(w)
    for p in PERCENTILES:
        out[f"p{p}"] = weighted_percentile(v, w, p, cum)
    del cum
    v -= out["mean"]  # from here on the squared deviations
    np.square(v, out=v)
    out["std"] = math.sqrt(max(_weighted_sum(v, w) / total, 0.0))
    return out


#: Pairs per step of :func:`_weighted_sum` (bounds its temporary array to 8 MB).
_SUM_CHUNK = 1 << 20


def _weighted_sum(v: np.ndarray, w: np.ndarray) -> float:
    """``Σ v·w`` in an order fixed by the data alone: numpy's pairwise sum of each chunk's
    products, the chunks added in order.

    Not ``np.dot``: BLAS splits a long dot product over threads, so its last bits depend on
    the machine's thread count, and its idle threads spin for a while after the call,
    burning CPU (about 6% of a 20k-request run on two cores).
    """
    total = 0.0
    for i in range(0, v.size, _SUM_CHUNK):
        total += float(np.add.reduce(v[i:i + _SUM_CHUNK] * w[i:i + _SUM_CHUNK]))
    return total


def _is_sorted(v: np.ndarray) -> bool:
    return v.size < 2 or bool(np.all(v[1:] >= v[:-1]))


def _merge_runs(v: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ``v`` with runs of equal values merged into one (their weights summed in int64).

    For finite values this equals ``numpy.unique`` with the weights summed per unique value
    (NaNs, which inter-token gaps never are, would stay apart instead of merging).
    """
    if v.size > 1:
        new = np.empty(v.size, dtype=bool)
        new[0] = True
        np.not_equal(v[1:], v[:-1], out=new[1:])
        if not new.all():
            starts = np.flatnonzero(new)
            return v[starts], np.add.reduceat(w, starts, dtype=np.int64)
    return v, w


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
        """All pairs, values sorted ascending, equal values merged (weights summed)."""
        if not self._values:
            return np.zeros(0), np.zeros(0, dtype=np.int64)
        # At a million requests the pairs take hundreds of MB, and this runs once per summary:
        # the chunks are copied once into the pairs' array and dropped, so at most the chunks
        # and that array (12 + 16 bytes a pair), then the array and its two columns (16 + 8 + 8
        # bytes), are alive at once (numpy.unique with an inverse index and bincount needed
        # about twice that).
        # Each pair as one complex number (value, weight): numpy sorts complex numbers by real
        # then imaginary part, so one in-place sort orders the pairs with no index array and no
        # gathers (an argsort and two gathers took about 1.6 times as long).  Weights are
        # counts, exact as floats.  Equal values then merge, their weights summed exactly;
        # gaps (later minus earlier time) are never -0.0, so equal means identical bits.
        n = sum(chunk.size for chunk in self._values)
        pairs = np.empty(n, dtype=np.complex128)
        at = 0
        for v, w in zip(self._values, self._weights):
            pairs.real[at:at + v.size] = v
            pairs.imag[at:at + v.size] = w
            at += v.size
        self._values = []  # only once the copy exists: a failed copy loses no sample
        self._weights = []
        pairs.sort()
        v = pairs.real.copy()
        w = pairs.imag.astype(np.int64)
        del pairs
        # Compact: identical values merge, keeping memory proportional to distinct gaps.
        uv, uw = _merge_runs(v, w)
        del v, w
        uw = uw.astype(np.int64, copy=False)
        self._values, self._weights = [uv], [uw]
        return uv, uw
