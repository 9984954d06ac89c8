"""Summary statistics over plain and weighted samples.

Inter-token gaps are stored as (value, count) pairs rather than one float per token, so
percentiles are computed on weighted samples; they equal what ``numpy.percentile``
(linear interpolation) gives on the expanded samples.
"""

from __future__ import annotations

import math

import numpy as np

PERCENTILES = (50, 90, 95, 99)
#: Relative accuracy of :class:`LogSketch`: every percentile it gives lies within 0.1% of
#: the exact percentile (numpy's linear interpolation) of the same sample.
SKETCH_ALPHA = 0.001
#: Samples (or weighted pairs) kept exactly; beyond, a statistic switches to the sketch.
EXACT_LIMIT = 1 << 21


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
    out = {"count": total, "mean": weighted_sum(v, w) / total, "std": 0.0, "min": float(v[0]), "max": float(v[-1])}
    cum = np.cumsum(w)
    for p in PERCENTILES:
        out[f"p{p}"] = weighted_percentile(v, w, p, cum)
    del cum
    v -= out["mean"]  # from here on the squared deviations
    np.square(v, out=v)
    out["std"] = math.sqrt(max(weighted_sum(v, w) / total, 0.0))
    return out


#: Pairs per step of :func:`weighted_sum` (bounds its temporary array to 8 MB).
_SUM_CHUNK = 1 << 20


def weighted_sum(v: np.ndarray, w: np.ndarray) -> float:
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
    """Accumulates (value, count) pairs in chunks; cheap to append, merged at the end.

    Exact while the pairs, equal values merged, number at most ``limit``
    (:data:`EXACT_LIMIT`); beyond, they move into a :class:`LogSketch` (percentiles within
    :data:`SKETCH_ALPHA`), so a run of any length holds bounded memory for them.
    """

    __slots__ = ("_values", "_weights", "_pending", "limit", "sketch")

    def __init__(self, limit: int = EXACT_LIMIT) -> None:
        self._values: list[np.ndarray] = []
        self._weights: list[np.ndarray] = []
        self._pending = 0
        self.limit = limit
        self.sketch: LogSketch | None = None

    def add(self, values: np.ndarray, weights: np.ndarray) -> None:
        if values.size:
            if self.sketch is not None:
                self.sketch.add(values, weights)
                return
            self._values.append(values)
            self._weights.append(weights)
            self._pending += values.size
            if self._pending > self.limit:
                self._compact()

    def add_one(self, value: float, weight: int) -> None:
        if weight > 0:
            self.add(np.array([value]), np.array([weight], dtype=np.int64))

    def _compact(self) -> None:
        """Merge equal values; still more than half the limit: hand everything to the sketch."""
        v, w = self.arrays()
        self._pending = v.size
        if v.size > self.limit // 2:
            self.sketch = LogSketch()
            self.sketch.add(v, w)
            self._values, self._weights, self._pending = [], [], 0

    def describe(self, scale: float = 1.0) -> dict[str, float | int | None]:
        """:func:`describe` of the pairs: exact, or the sketch's beyond the limit."""
        if self.sketch is not None:
            return self.sketch.describe(scale)
        v, w = self.arrays()
        return describe(v, w, scale=scale)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """All pairs, values sorted ascending, equal values merged (weights summed); the
        exact pairs only (see :meth:`describe` once a sketch took over)."""
        if self.sketch is not None:
            raise ValueError("the samples went into a sketch (more than the exact limit): use describe()")
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


# ---------------------------------------------------------------------------------------
# Bounded memory at any scale: a mergeable sketch beyond a size
# ---------------------------------------------------------------------------------------



class LogSketch:
    """A mergeable quantile sketch with relative error bound ``alpha`` (the DDSketch idea:
    logarithmic buckets), plus exact count, sum, sum of squares, min and max.

    A value ``v > 0`` falls in bucket ``k = ceil(log(v) / log(gamma))`` with
    ``gamma = (1 + alpha) / (1 - alpha)``: the bucket ``(gamma^(k-1), gamma^k]`` is reported
    as ``2 gamma^k / (gamma + 1)``, within ``alpha`` (relative) of every value in it.  Values
    at or below ``TINY`` count as 0.  A percentile interpolates linearly between the values at
    the two ranks around ``q/100 * (n - 1)``, as numpy does, each replaced by its bucket's
    representative, so the result is within ``alpha`` (relative) of the exact one.  Two
    sketches merge by adding bucket counts (chunks of one run, or several runs).
    Memory: one int64 per bucket between the smallest and largest key seen (~21k buckets
    from 1 ns to 1000 s at alpha = 0.001, 170 KB), whatever the number of values.
    """

    TINY = 1e-12

    def __init__(self, alpha: float = SKETCH_ALPHA) -> None:
        self.alpha = alpha
        self.gamma = (1.0 + alpha) / (1.0 - alpha)
        self._ln_gamma = math.log(self.gamma)
        self.counts = np.zeros(0, dtype=np.int64)
        self.offset = 0  # key of counts[0]
        self.zeros = 0
        self.count = 0
        self.sum = 0.0
        self.sumsq = 0.0
        self.min = math.inf
        self.max = -math.inf

    def add(self, values: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Add values (each ``weights`` times); values must be finite and >= 0."""
        v = np.asarray(values, dtype=np.float64)
        if v.size == 0:
            return
        w = np.ones(v.size, dtype=np.int64) if weights is None else np.asarray(weights, dtype=np.int64)
        self.count += int(w.sum())
        self.sum += weighted_sum(v, w)
        self.sumsq += weighted_sum(v * v, w)
        self.min = min(self.min, float(v.min()))
        self.max = max(self.max, float(v.max()))
        tiny = v <= self.TINY
        if tiny.any():
            self.zeros += int(w[tiny].sum())
            v, w = v[~tiny], w[~tiny]
            if v.size == 0:
                return
        keys = np.ceil(np.log(v) / self._ln_gamma).astype(np.int64)
        self._grow(int(keys.min()), int(keys.max()))
        self.counts += np.bincount(keys - self.offset, weights=w, minlength=self.counts.size).astype(np.int64)

    def _grow(self, lo: int, hi: int) -> None:
        if self.counts.size == 0:
            self.offset, self.counts = lo, np.zeros(hi - lo + 1, dtype=np.int64)
            return
        cur_hi = self.offset + self.counts.size - 1
        new_lo, new_hi = min(lo, self.offset), max(hi, cur_hi)
        if (new_lo, new_hi) != (self.offset, cur_hi):
            grown = np.zeros(new_hi - new_lo + 1, dtype=np.int64)
            grown[self.offset - new_lo:self.offset - new_lo + self.counts.size] = self.counts
            self.offset, self.counts = new_lo, grown

    def merge(self, other: "LogSketch") -> None:
        """Add another sketch's values (same ``alpha``)."""
        if other.alpha != self.alpha:
            raise ValueError("sketches of different accuracy do not merge")
        if other.counts.size:
            self._grow(other.offset, other.offset + other.counts.size - 1)
            start = other.offset - self.offset
            self.counts[start:start + other.counts.size] += other.counts
        self.zeros += other.zeros
        self.count += other.count
        self.sum += other.sum
        self.sumsq += other.sumsq
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    def _value_at_rank(self, rank: int, cum: np.ndarray) -> float:
        if rank < self.zeros:
            return 0.0
        i = int(np.searchsorted(cum, rank - self.zeros, side="right"))
        value = 2.0 * self.gamma ** (self.offset + i) / (self.gamma + 1.0)
        return min(max(value, self.min), self.max)  # the extremes are known exactly

    def percentile(self, q: float, cum: np.ndarray | None = None) -> float:
        if cum is None:
            cum = np.cumsum(self.counts)
        pos = q / 100.0 * (self.count - 1)
        lo = math.floor(pos)
        frac = pos - lo
        v_lo = self._value_at_rank(lo, cum)
        if frac == 0.0:
            return v_lo
        return v_lo + frac * (self._value_at_rank(lo + 1, cum) - v_lo)

    def describe(self, scale: float = 1.0) -> dict[str, float | int | None]:
        """The same statistics as :func:`describe`: exact count, mean, std, min, max;
        percentiles within ``alpha``."""
        if self.count == 0:
            return describe(np.zeros(0), scale=scale)
        mean = self.sum / self.count
        var = max(self.sumsq / self.count - mean * mean, 0.0)
        out: dict[str, float | int | None] = {
            "count": self.count, "mean": mean * scale, "std": math.sqrt(var) * scale,
            "min": self.min * scale, "max": self.max * scale}
        cum = np.cumsum(self.counts)
        for p in PERCENTILES:
            out[f"p{p}"] = self.percentile(p, cum) * scale
        return out


class Accumulator:
    """Values of one statistic gathered chunk by chunk: exact up to ``limit`` values, a
    :class:`LogSketch` beyond (so a summary of any number of requests holds bounded memory)."""

    def __init__(self, limit: int = EXACT_LIMIT) -> None:
        self.limit = limit
        self._chunks: list[np.ndarray] = []
        self._n = 0
        self.sketch: LogSketch | None = None

    def add(self, values: np.ndarray) -> None:
        v = np.asarray(values, dtype=np.float64)
        v = v[~np.isnan(v)]
        if v.size == 0:
            return
        if self.sketch is not None:
            self.sketch.add(v)
            return
        self._chunks.append(v)
        self._n += v.size
        if self._n > self.limit:
            self.sketch = LogSketch()
            for c in self._chunks:
                self.sketch.add(c)
            self._chunks = []

    def describe(self, scale: float = 1.0) -> dict[str, float | int | None]:
        """Exact statistics (:func:`describe`) up to the limit, the sketch's beyond."""
        if self.sketch is not None:
            return self.sketch.describe(scale)
        values = np.concatenate(self._chunks) if self._chunks else np.zeros(0)
        return describe(values, scale=scale)

    @property
    def exact(self) -> bool:
        return self.sketch is None
