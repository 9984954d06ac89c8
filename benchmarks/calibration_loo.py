"""Leave-one-model-family-out and leave-one-GPU-out figures of the shipped calibration procedure.

Reads a sensitivities table of calibration.csv (``servesim calibrate --method sensitivity
--sensitivities TABLE.csv``, or a folder of chunks from benchmarks/measure_sensitivities.py),
refits the calibration without each model family / GPU in turn (the linear surrogate: seconds per
refit) and scores the held-out rows; the same for the random split (fit rows → held-out rows)
and in sample.  ``--check N`` re-simulates N held-out rows of each kind for real, with the
calibration their fold's refit gives them, and prints the real simulation's error per fold and
overall beside the surrogate's (how far the surrogate's figures can be trusted); ``--check 1403``
simulates every held-out row (the real-simulation leave-one-out figures, about ten minutes per
kind on two processes).

    python benchmarks/calibration_loo.py --points ../shared/data/measured/calibration.csv \\
        --sensitivities sens/ [--check 20 --processes 2] [--markdown]
"""

from __future__ import annotations

import argparse
import csv
import random
import time

import numpy as np

from servesim.validate.crossval import cross_validate, fold_of, in_sample, read_tables
from servesim.validate.groupfit import fit_shipped
from servesim.validate.points import load_points


def check_against_simulation(sens, kind: str, n: int, processes: int, out: str | None = None) -> None:
    """Real simulations of ``n`` random held-out rows of ``kind`` under their fold's refit
    (every held-out row when ``n`` is at least their number): the real-simulation MAPE per fold
    and overall beside the surrogate's, and, with ``out``, one CSV row per simulated point."""
    from servesim.validate.crossval import surrogate_prediction
    from servesim.validate.run import validate_points

    ok = [s for s in sens if s.status == "ok"]
    rng = random.Random(0)
    picks = rng.sample(ok, min(n, len(ok)))
    by_fold: dict[str, list] = {}
    for s in picks:
        by_fold.setdefault(fold_of(s, kind), []).append(s)
    records = []  # (fold, id, measured ttft, tpot, real ttft, tpot, surrogate ttft, tpot)
    for fold, chosen in sorted(by_fold.items()):
        if kind == "split" and fold != "holdout":
            continue
        cal = fit_shipped([s for s in ok if fold_of(s, kind) != fold])
        rows = validate_points([s.point for s in chosen], cal, processes=processes)
        for s, row in zip(chosen, rows):
            if row.status != "ok":
                continue
            st, sp = surrogate_prediction(cal, s)
            records.append((fold, s.point.row["id"], s.point.measured_ttft_ms, s.point.measured_tpot_ms,
                            row.pred_ttft, row.pred_tpot, st, sp))
    if not records:
        print(f"check {kind}: no row simulated")
        return
    a = np.array([r[2:] for r in records], dtype=float)
    real_t, real_p = np.abs(a[:, 2] / a[:, 0] - 1), np.abs(a[:, 3] / a[:, 1] - 1)
    sur_t, sur_p = np.abs(a[:, 4] / a[:, 0] - 1), np.abs(a[:, 5] / a[:, 1] - 1)
    folds = np.array([r[0] for r in records])
    print(f"check {kind}, simulated for real (surrogate in brackets): fold, rows, TTFT MAPE, TPOT MAPE")
    for fold in sorted(set(folds)):
        m = folds == fold
        print(f"  {fold:22s} {m.sum():5d}  {real_t[m].mean():6.1%} ({sur_t[m].mean():.1%})  "
              f"{real_p[m].mean():6.1%} ({sur_p[m].mean():.1%})")
    diffs_t, diffs_p = np.abs(a[:, 4] / a[:, 2] - 1), np.abs(a[:, 5] / a[:, 3] - 1)
    print(f"check {kind}: {len(records)} held-out rows simulated for real: MAPE TTFT {real_t.mean():.1%} "
          f"(surrogate {sur_t.mean():.1%}), TPOT {real_p.mean():.1%} (surrogate {sur_p.mean():.1%}); "
          f"surrogate vs simulation median |diff| TTFT {np.median(diffs_t):.1%}, TPOT {np.median(diffs_p):.1%}")
    if out:
        with open(out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["id", "held_out", "measured_ttft_ms", "measured_tpot_ms", "ttft_ms", "tpot_ms",
                        "surrogate_ttft_ms", "surrogate_tpot_ms"])
            for r in records:
                w.writerow([r[1], r[0], *(f"{x:.6g}" for x in r[2:])])
        print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", required=True)
    ap.add_argument("--sensitivities", required=True, help="a table, or a folder of chunk tables")
    ap.add_argument("--kinds", default="family,gpu,split,in-sample")
    ap.add_argument("--check", type=int, default=0, help="simulate this many held-out rows per kind for real")
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--out", help="write each kind's held-out rows to OUT.<kind>.csv")
    args = ap.parse_args()
    points = load_points(args.points)
    sens = read_tables(args.sensitivities, points)
    n_ok = sum(s.status == "ok" for s in sens)
    print(f"{n_ok} of {len(points)} points have sensitivities")
    for kind in args.kinds.split(","):
        t0 = time.perf_counter()
        res = in_sample(sens, fit_shipped) if kind == "in-sample" else cross_validate(sens, kind, fit_shipped)
        print(f"\n{kind} ({time.perf_counter() - t0:.0f} s)")
        print(res.format(markdown=args.markdown))
        if args.out:
            from servesim.validate.cli import _write_cv_rows

            _write_cv_rows(res, f"{args.out}.{kind}.csv")
        if args.check and kind != "in-sample":
            check_against_simulation(sens, kind, args.check, args.processes,
                                     f"{args.out}.{kind}.real.csv" if args.out else None)


if __name__ == "__main__":
    main()
