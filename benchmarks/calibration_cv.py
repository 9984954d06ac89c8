"""Split-half cross-validation of the sensitivity fit's settings, on the surrogate alone.

The fit rows' sensitivities (``servesim calibrate --method sensitivity --sensitivities FILE``)
are split in two by a hash of the row id; each half is fitted and the other half scored
(MAPE of mean TTFT and TPOT under the linear surrogate, no simulation: seconds).  Used to
choose the residual (relative vs log) and the prior scale; the honest figure remains
``servesim validate`` on the held-out rows.

    python benchmarks/calibration_cv.py --sensitivities sens_fit_r4.csv \\
        --points ../shared/data/measured/calibration.csv
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Sequence

import numpy as np

from servesim.validate.groupfit import fit_hierarchy
from servesim.validate.points import load_points
from servesim.validate.sensitivity import DEFAULT_BASE, PointSensitivity, read_sensitivities


def surrogate_mape(cal, sens: Sequence[PointSensitivity]) -> tuple[float, float]:
    """MAPE of (TTFT, TPOT) that ``cal`` gives ``sens`` under their surrogates."""
    et, ep = [], []
    for s in sens:
        p = s.point
        a, f = p.calibration_values(cal)
        ttft, tpot = s.predict_resolved(a, f, DEFAULT_BASE)
        et.append(abs(ttft - p.measured_ttft_ms) / p.measured_ttft_ms)
        ep.append(abs(tpot - p.measured_tpot_ms) / p.measured_tpot_ms)
    return float(np.mean(et)), float(np.mean(ep))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sensitivities", required=True)
    ap.add_argument("--points", required=True)
    ap.add_argument("--split", default="fit")
    args = ap.parse_args()
    points = load_points(args.points, split=args.split)
    sens = [s for s in read_sensitivities(args.sensitivities, points) if s.status == "ok"]
    halves = [[s for s in sens if int(hashlib.sha256(s.point.id.encode()).hexdigest(), 16) % 2 == h]
              for h in (0, 1)]
    print(f"{len(sens)} points: halves of {len(halves[0])} and {len(halves[1])}")
    print("objective  prior_scale  test MAPE TTFT / TPOT (A→B)  (B→A)")
    for objective in ("log", "relative"):
        for prior_scale in (1.0, 0.5, 0.25, 0.1):
            scores = []
            for train, test in ((halves[0], halves[1]), (halves[1], halves[0])):
                cal = fit_hierarchy(train, DEFAULT_BASE, prior_scale=prior_scale, objective=objective)
                scores.append(surrogate_mape(cal, test))
            (t1, p1), (t2, p2) = scores
            print(f"{objective:9s}  {prior_scale:11.2f}  {t1:6.1%} / {p1:5.1%}          {t2:6.1%} / {p2:5.1%}")


if __name__ == "__main__":
    main()
