"""Weighted statistics: the ITL summary must equal numpy on the expanded per-token samples."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.metrics.stats import PERCENTILES, WeightedSamples, describe, weighted_percentile

# Gaps drawn from a small set of values, so that equal values (which must merge) are common.
_gap = st.sampled_from([1e-3, 2.5e-3, 0.01, 0.0125, 0.02, 0.1, 1.0]) | st.floats(1e-4, 2.0)
_pairs = st.lists(st.tuples(_gap, st.integers(0, 50)), min_size=1, max_size=200)


@settings(max_examples=200, deadline=None)
@given(_pairs)
def test_weighted_describe_equals_numpy_on_expanded_samples(pairs):
    v = np.array([p[0] for p in pairs])
    w = np.array([p[1] for p in pairs], dtype=np.int64)
    got = describe(v, w, scale=1000.0)
    expanded = np.repeat(v, w) * 1000.0
    if expanded.size == 0:
        assert got["count"] == 0 and got["mean"] is None
        return
    assert got["count"] == expanded.size
    assert np.isclose(got["mean"], expanded.mean(), rtol=1e-12)
    assert np.isclose(got["std"], expanded.std(), rtol=1e-9, atol=1e-9)
    assert got["min"] == expanded.min() and got["max"] == expanded.max()
    for p, want in zip(PERCENTILES, np.percentile(expanded, PERCENTILES)):
        assert np.isclose(got[f"p{p}"], want, rtol=1e-12), p


def _merged(values, weights):
    """The pairs as WeightedSamples.arrays gives them: sorted, equal values merged."""
    s = WeightedSamples()
    s.add(values, weights)
    return s.arrays()


@settings(max_examples=200, deadline=None)
@given(_pairs)
def test_merged_pairs_equal_unique_with_summed_weights(pairs):
    v = np.array([p[0] for p in pairs])
    w = np.array([p[1] for p in pairs], dtype=np.int64)
    uv, uw = _merged(v, w)
    want_v, inv = np.unique(v, return_inverse=True)
    want_w = np.bincount(inv.ravel(), weights=w).astype(np.int64)
    assert np.array_equal(uv, want_v)
    assert np.array_equal(uw, want_w)
    assert uw.dtype == np.int64


def test_sorted_and_unsorted_input_give_identical_statistics():
    rng = np.random.default_rng(3)
    v = rng.random(5000)
    w = rng.integers(1, 9, size=5000)
    uv, uw = _merged(v, w)
    assert describe(v, w, scale=1000.0) == describe(uv, uw, scale=1000.0)


def test_weighted_samples_merge_chunks_and_keep_accumulating():
    s = WeightedSamples()
    s.add(np.array([0.02, 0.01]), np.array([3, 1]))
    s.add_one(0.01, 2)
    s.add_one(0.5, 0)  # zero weight: nothing to count
    v, w = s.arrays()
    assert v.tolist() == [0.01, 0.02] and w.tolist() == [3, 3]
    s.add(np.array([0.005]), np.array([4], dtype=np.int32))  # more after a summary: merged with the compacted pairs
    v, w = s.arrays()
    assert v.tolist() == [0.005, 0.01, 0.02] and w.tolist() == [4, 3, 3]
    assert w.dtype == np.int64
    only32 = WeightedSamples()
    only32.add(np.array([0.3, 0.1]), np.array([2, 2], dtype=np.int32))
    assert only32.arrays()[1].dtype == np.int64  # counts leave as int64 whatever they were stored as


def _reference_describe(values, weights, scale):
    """The weighted summary as servesim computed it before its memory was reduced (numpy.unique
    and bincount to merge, a full sort and filtered copies): the new code must match it bit for bit."""
    uv, inv = np.unique(values, return_inverse=True)
    uw = np.bincount(inv.ravel(), weights=weights).astype(np.int64)
    order = np.argsort(uv, kind="stable")
    v = uv[order] * scale
    w = uw[order]
    keep = w > 0
    v, w = v[keep], w[keep]
    total = int(w.sum())
    mean = float(np.add.reduce(v * w)) / total  # servesim's fixed-order sum (not BLAS's dot)
    var = float(np.add.reduce((v - mean) ** 2 * w)) / total
    out = {"count": total, "mean": mean, "std": float(np.sqrt(max(var, 0.0))), "min": float(v[0]),
           "max": float(v[-1])}
    for p in PERCENTILES:
        out[f"p{p}"] = weighted_percentile(v, w, p)
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_gap, st.integers(1, 50)), min_size=1, max_size=300), st.sampled_from([1.0, 1000.0]))
def test_itl_summary_is_bit_identical_to_the_unique_and_bincount_computation(pairs, scale):
    s = WeightedSamples()
    half = len(pairs) // 2
    for chunk, dtype in ((pairs[:half], np.int32), (pairs[half:], np.int64)):  # the recorder's chunks are int32
        if chunk:
            s.add(np.array([p[0] for p in chunk]), np.array([p[1] for p in chunk], dtype=dtype))
    v = np.array([p[0] for p in pairs])
    w = np.array([p[1] for p in pairs], dtype=np.int64)
    got = describe(*s.arrays(), scale=scale)
    assert got == _reference_describe(v, w, scale)  # exact: ==, not isclose


def test_weighted_sum_over_chunks_is_accurate_and_fixed(monkeypatch):
    """Sums longer than a chunk add the chunks' pairwise sums in order: accurate to about an
    ulp of the exact sum, and the same however many threads the machine has."""
    import math

    from servesim.metrics import stats

    rng = np.random.default_rng(5)
    v = rng.random(10_000) * 0.05
    w = rng.integers(1, 40, 10_000)
    exact = math.fsum((v * w).tolist())
    monkeypatch.setattr(stats, "_SUM_CHUNK", 1024)  # ten chunks
    chunked = stats.weighted_sum(v, w)
    assert chunked == sum(float(np.add.reduce(v[i:i + 1024] * w[i:i + 1024])) for i in range(0, v.size, 1024))
    assert abs(chunked - exact) <= 1e-12 * exact
    got = describe(v, w)
    assert abs(got["mean"] - exact / int(w.sum())) <= 1e-12 * got["mean"]
