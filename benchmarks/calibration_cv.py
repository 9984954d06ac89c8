"""Cross-validation of the sensitivity fit's settings, on the surrogate alone.

Split half (default): the fit rows' sensitivities (``servesim calibrate --method sensitivity
--sensitivities FILE``) are split in two by a hash of the row id; each half is fitted and the
other half scored (MAPE of mean TTFT and TPOT under the linear surrogate, no simulation:
seconds).  Used to choose the residual (relative vs log) and the prior scale.

``--leave-models-out``: every model group (``<gpu>/<engine>/<model>@<precision>``, 3 points or
more) is left out in turn, the rest fitted and the group scored: how well a model calibration
never saw is predicted, for several pulls of the GPU/engine values a model without a group
gets toward the shared ones (``GPU_ENGINE_FALLBACK_PRIOR_WEIGHT``), and for the shared values
alone.  It also prints the split-half score of each pull (models with fewer than 3 points in
a half use those values too).  About 2 minutes per setting.

The honest figure remains ``servesim validate`` on the held-out rows.

    python benchmarks/calibration_cv.py --sensitivities sens_fit_r4.csv \\
        --points ../shared/data/measured/calibration.csv
    python benchmarks/calibration_cv.py --sensitivities sens_all.csv --split all --leave-models-out \\
        --points ../shared/data/measured/calibration.csv
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Sequence

import numpy as np

from servesim.validate.groupfit import fit_hierarchy, model_key
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


def weighted_mape(scores: Sequence[tuple[int, float, float]]) -> tuple[float, float]:
    """Point-weighted mean of (points, TTFT MAPE, TPOT MAPE) triples."""
    n = sum(k for k, _, _ in scores)
    return sum(k * t for k, t, _ in scores) / n, sum(k * p for k, _, p in scores) / n


def leave_models_out(sens: Sequence[PointSensitivity], fallback_weights: Sequence[float]) -> None:
    """Score every model group from a fit without it, per fallback pull (see module docstring)."""
    groups: dict[str, list[PointSensitivity]] = {}
    for s in sens:
        groups.setdefault(model_key(s), []).append(s)
    left = {k: v for k, v in sorted(groups.items()) if len(v) >= 3}
    halves = _halves(sens)
    print(f"{len(left)} model groups left out in turn ({sum(map(len, left.values()))} points)")
    print("fallback pull   left-out models TTFT / TPOT   split half TTFT / TPOT")
    for weight in fallback_weights:
        unseen = [(len(pts), *surrogate_mape(fit_hierarchy([s for s in sens if model_key(s) != key], DEFAULT_BASE,
                                                           fallback_prior_weight=weight), pts))
                  for key, pts in left.items()]
        half = [(len(test), *surrogate_mape(fit_hierarchy(train, DEFAULT_BASE, fallback_prior_weight=weight), test))
                for train, test in ((halves[0], halves[1]), (halves[1], halves[0]))]
        (t, p), (ht, hp) = weighted_mape(unseen), weighted_mape(half)
        print(f"{weight:14.1f}  {t:6.1%} / {p:5.1%}              {ht:6.1%} / {hp:5.1%}")
    shared_only = [(len(pts), *surrogate_mape(
        fit_hierarchy([s for s in sens if model_key(s) != key], DEFAULT_BASE, groups=False), pts))
        for key, pts in left.items()]
    t, p = weighted_mape(shared_only)
    print(f"{'shared only':14s}  {t:6.1%} / {p:5.1%}")


def _halves(sens: Sequence[PointSensitivity]) -> list[list[PointSensitivity]]:
    return [[s for s in sens if int(hashlib.sha256(s.point.id.encode()).hexdigest(), 16) % 2 == h]
            for h in (0, 1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sensitivities", required=True)
    ap.add_argument("--points", required=True)
    ap.add_argument("--split", default="fit", choices=["fit", "holdout", "all"])
    ap.add_argument("--leave-models-out", action="store_true",
                    help="score each model group from a fit without it, per fallback pull")
    args = ap.parse_args()
    points = load_points(args.points, split=None if args.split == "all" else args.split)
    sens = [s for s in read_sensitivities(args.sensitivities, points) if s.status == "ok"]
    if args.leave_models_out:
        leave_models_out(sens, (0.3, 3.0, 10.0, 30.0))
        return
    halves = _halves(sens)
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
