"""Leave-one-model-family-out and leave-one-GPU-out figures of the shipped calibration procedure.

Reads a sensitivities table of calibration.csv (``servesim calibrate --method sensitivity
--sensitivities TABLE.csv``, or a folder of chunks from benchmarks/measure_sensitivities.py),
refits the calibration without each model family / GPU in turn (the linear surrogate: seconds per
refit) and scores the held-out rows; the same for the random split (fit rows → held-out rows)
and in sample.  ``--check N`` re-simulates N held-out rows of each kind for real, with the
calibration their fold's refit gives them, and prints the surrogate's error against the real
simulation's (how far the surrogate's figures can be trusted).

    python benchmarks/calibration_loo.py --points ../shared/data/measured/calibration.csv \\
        --sensitivities sens/ [--check 20 --processes 2] [--markdown]
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from servesim.validate.crossval import cross_validate, fold_of, in_sample, read_tables
from servesim.validate.groupfit import fit_shipped
from servesim.validate.points import load_points


def check_against_simulation(sens, kind: str, n: int, processes: int) -> None:
    """Real simulations of ``n`` random held-out rows of ``kind`` under their fold's refit."""
    from servesim.validate.run import validate_points

    ok = [s for s in sens if s.status == "ok"]
    rng = random.Random(0)
    picks = rng.sample(ok, min(n, len(ok)))
    by_fold: dict[str, list] = {}
    for s in picks:
        by_fold.setdefault(fold_of(s, kind), []).append(s)
    diffs_t, diffs_p, real_t, real_p, sur_t, sur_p = [], [], [], [], [], []
    for fold, chosen in sorted(by_fold.items()):
        if kind == "split" and fold != "holdout":
            continue
        cal = fit_shipped([s for s in ok if fold_of(s, kind) != fold])
        rows = validate_points([s.point for s in chosen], cal, processes=processes)
        for s, row in zip(chosen, rows):
            if row.status != "ok":
                continue
            from servesim.validate.crossval import surrogate_prediction

            st, sp = surrogate_prediction(cal, s)
            mt, mp = s.point.measured_ttft_ms, s.point.measured_tpot_ms
            real_t.append(abs(row.pred_ttft - mt) / mt)
            real_p.append(abs(row.pred_tpot - mp) / mp)
            sur_t.append(abs(st - mt) / mt)
            sur_p.append(abs(sp - mp) / mp)
            diffs_t.append(abs(st - row.pred_ttft) / row.pred_ttft)
            diffs_p.append(abs(sp - row.pred_tpot) / row.pred_tpot)
    if not real_t:
        print(f"check {kind}: no row simulated")
        return
    print(f"check {kind}: {len(real_t)} held-out rows simulated for real: MAPE TTFT {np.mean(real_t):.1%} "
          f"(surrogate {np.mean(sur_t):.1%}), TPOT {np.mean(real_p):.1%} (surrogate {np.mean(sur_p):.1%}); "
          f"surrogate vs simulation median |diff| TTFT {np.median(diffs_t):.1%}, TPOT {np.median(diffs_p):.1%}")


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
            check_against_simulation(sens, kind, args.check, args.processes)


if __name__ == "__main__":
    main()
