"""How much of a TTFT error figure comes from measured means that carry a tail, and whether the
predictions match the middle of the measured distributions.

calibration.csv records each run's *mean* TTFT; 128 of its rows (InferenceX's DeepSeek-R1 runs on
SGLang, TensorRT-LLM and ATOM) also record the *median*.  Where a few requests of a run wait
seconds (a first wave admitted behind a long prefill, a kernel compiled on first use, a stall the
engine's scheduler does not explain), the mean sits far above the median, and a simulator whose
passes are priced right matches the median but not the mean.  An absolute percentage error of an
under-prediction is at most 100%, so such rows each add close to their full weight to a MAPE.

Printed, from the measured rows and one prediction per row (``servesim validate --out`` or
``calibration_loo.py``'s ``*.real.csv``):

- the TTFT MAPE split by how far the measured mean sits above the prediction (ratio bands): each
  band's rows and its share of the MAPE (the shares add up to the MAPE);
- for the rows with a published median, by engine and concurrency: the geometric mean of
  predicted mean / measured mean and of predicted mean / measured median, and the median of the
  measured mean / median ratio.

::

    python benchmarks/ttft_tails.py --points ../shared/data/measured/calibration.csv --predictions FILE
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

#: bands of measured mean TTFT / predicted mean TTFT (upper bounds)
RATIO_BANDS = (0.5, 0.8, 1.25, 2.0, 3.0, np.inf)
#: concurrency bands (upper bounds) of the median comparison
CONCURRENCY_BANDS = (4, 16, 64, 256, np.inf)


def predictions(path: str) -> pd.Series:
    """Predicted mean TTFT (ms) by row id, from either output format."""
    df = pd.read_csv(path)
    col = "predicted_mean_ttft_ms" if "predicted_mean_ttft_ms" in df else "ttft_ms"
    if col not in df or "id" not in df:
        raise SystemExit(f"{path}: expected an 'id' column and 'predicted_mean_ttft_ms' or 'ttft_ms'")
    return df.set_index("id")[col].astype(float)


def joined(points: pd.DataFrame, pred: pd.Series) -> pd.DataFrame:
    """The measured rows that have a finite positive prediction, with it as ``pred``."""
    df = points.set_index("id").join(pred.rename("pred"), how="inner")
    return df[np.isfinite(df.pred) & (df.pred > 0) & (df.measured_mean_ttft_ms > 0)]


def mape_by_ratio_band(df: pd.DataFrame) -> pd.DataFrame:
    """Rows and share of the TTFT MAPE (points) per band of measured / predicted."""
    ape = (df.pred / df.measured_mean_ttft_ms - 1.0).abs() * 100.0
    ratio = df.measured_mean_ttft_ms / df.pred
    lows = (0.0,) + RATIO_BANDS[:-1]
    out = []
    for lo, hi in zip(lows, RATIO_BANDS):
        m = (ratio >= lo) & (ratio < hi)
        out.append({"measured/predicted": f"[{lo:g}, {hi:g})", "rows": int(m.sum()),
                    "share of MAPE": float(ape[m].sum() / len(df))})
    return pd.DataFrame(out)


def median_comparison(df: pd.DataFrame) -> pd.DataFrame:
    """For rows with a measured median TTFT: per engine and concurrency band, geometric means of
    predicted / measured mean and predicted / measured median, and the median measured mean/median."""
    m = df[df.measured_median_ttft_ms > 0].copy()
    if m.empty:
        return pd.DataFrame()
    m["band"] = pd.cut(m.concurrency.astype(float), (0,) + CONCURRENCY_BANDS)
    gm = lambda s: float(np.exp(np.log(s).mean()))  # noqa: E731
    m["vs_mean"] = m.pred / m.measured_mean_ttft_ms
    m["vs_median"] = m.pred / m.measured_median_ttft_ms
    m["mean_over_median"] = m.measured_mean_ttft_ms / m.measured_median_ttft_ms
    g = m.groupby(["backend", "band"], observed=True)
    out = g.agg(rows=("pred", "size"), pred_over_mean=("vs_mean", gm), pred_over_median=("vs_median", gm),
                measured_mean_over_median=("mean_over_median", "median")).reset_index()
    out["band"] = out.band.astype(str)  # in concurrency order (the categories' order)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", required=True, help="calibration.csv")
    ap.add_argument("--predictions", required=True, help="servesim validate --out CSV or calibration_loo *.real.csv")
    a = ap.parse_args(argv)
    df = joined(pd.read_csv(a.points), predictions(a.predictions))
    ape = (df.pred / df.measured_mean_ttft_ms - 1.0).abs() * 100.0
    print(f"{len(df)} rows, TTFT MAPE {ape.mean():.2f}%")
    print("\nTTFT MAPE by how far the measured mean sits above the prediction")
    print(mape_by_ratio_band(df).to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    med = median_comparison(df)
    if not med.empty:
        print("\nrows with a measured median TTFT (geometric means of the ratios)")
        print(med.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
