"""benchmarks/ttft_tails.py: the TTFT MAPE split by how far measured means sit above the
predictions, and predictions against the measured medians."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchscripts import load_benchmark


@pytest.fixture(scope="module")
def tails():
    return load_benchmark("ttft_tails")


def _points():
    rows = [("a", 100.0, 100.0, 8), ("b", 400.0, 110.0, 8), ("c", 40.0, np.nan, 2), ("d", 1000.0, 200.0, 64)]
    return pd.DataFrame([{"id": i, "backend": "sglang", "concurrency": c, "measured_mean_ttft_ms": mean,
                          "measured_median_ttft_ms": med} for i, mean, med, c in rows])


def test_band_shares_add_up_to_the_mape_and_place_each_row(tails):
    """Predictions 100 ms everywhere: a is exact, b's mean is 4x the prediction (75% off), c is
    predicted 2.5x too slow (150% off), d's mean is 10x (90% off)."""
    pred = pd.Series({"a": 100.0, "b": 100.0, "c": 100.0, "d": 100.0})
    df = tails.joined(_points(), pred)
    bands = tails.mape_by_ratio_band(df).set_index("measured/predicted")
    assert bands["share of MAPE"].sum() == pytest.approx((0 + 75 + 150 + 90) / 4)
    assert bands.loc["[3, inf)", "rows"] == 2 and bands.loc["[3, inf)", "share of MAPE"] == pytest.approx(165 / 4)
    assert bands.loc["[0, 0.5)", "rows"] == 1 and bands.loc["[0.8, 1.25)", "rows"] == 1


def test_median_comparison_uses_only_rows_with_a_median(tails):
    """c has no median; a and b share a concurrency band: geometric mean of 100/100 and 100/110
    against the medians, of 100/100 and 100/400 against the means."""
    pred = pd.Series({"a": 100.0, "b": 100.0, "c": 100.0, "d": 100.0})
    med = tails.median_comparison(tails.joined(_points(), pred)).set_index("band")
    assert med.rows.sum() == 3
    row = med.loc["(4.0, 16.0]"]
    assert row.pred_over_median == pytest.approx(np.sqrt(1.0 * 100 / 110))
    assert row.pred_over_mean == pytest.approx(np.sqrt(1.0 * 0.25))
    assert row.measured_mean_over_median == pytest.approx((1.0 + 400 / 110) / 2)


def test_rows_without_a_prediction_are_left_out(tails):
    pred = pd.Series({"a": 100.0, "b": float("nan")})
    assert list(tails.joined(_points(), pred).index) == ["a"]
