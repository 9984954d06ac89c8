"""Fit analytic-model efficiencies and frontend parameters to measured points.

Each measured point is simulated (closed loop, like the benchmark) and the fit minimises the
log-error of mean TTFT and mean TPOT (``scipy.optimize.least_squares``, soft-L1 loss, bounds,
parameters in log space).  Fitting simulates a reduced number of prompts
(``fit_prompts × concurrency``, warm-up = concurrency) since the means converge; validate
uses the real counts.

Procedure: one *shared* fit over a sample of every supported point, then one fit per
``<gpu>/<engine>`` group with at least ``min_group_points`` points, started from the shared
values.  Smaller groups use the shared values.  Points of workload
``fixed_lengths_unverified`` (client settings undocumented) weigh half.
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from servesim.perf.calibration import Calibration
from servesim.validate.points import Point
from servesim.validate.simulate import simulate_point


@dataclass(frozen=True)
class FitParam:
    """A fitted parameter: which params block, name, start and bounds (positive values)."""

    kind: str  # "analytic" or "frontend"
    name: str
    start: float
    lo: float
    hi: float


#: What the fit moves.  GPU-side efficiencies, and the non-GPU stages explicitly.
#: Starts are the previous shipped fit's shared values.
DEFAULT_FIT: tuple[FitParam, ...] = (
    FitParam("analytic", "mem_eff", 0.6, 0.1, 1.0),
    FitParam("analytic", "gemm_eff_max", 0.85, 0.1, 1.0),
    FitParam("analytic", "attn_prefill_eff_max", 0.3, 0.05, 1.0),
    FitParam("frontend", "scheduler_pass_s", 2.8e-3, 1e-5, 0.05),
    FitParam("frontend", "first_token_overhead_s", 0.016, 1e-4, 2.0),
    FitParam("frontend", "tokenize_per_token_s", 5.6e-6, 1e-8, 2e-4),
)

#: Measured-workload weights (undocumented clients count less).
WORKLOAD_WEIGHT = {"inferencex_random": 1.0, "fixed_lengths_unverified": 0.5}
#: Residual of a point whose simulation failed or completed nothing.
FAILED_RESIDUAL = 3.0


def _fit_counts(point: Point, fit_prompts: int) -> tuple[int, int]:
    c = point.concurrency
    return max(2 * c, fit_prompts * c), c


def _eval_one(args) -> tuple[float, float]:
    config, analytic, frontend, n, w = args
    try:
        r = simulate_point(config, analytic, frontend, num_prompts=n, warmup=w)
    except Exception as e:  # a parameter set the deployment rejects counts as a miss
        import sys

        print(f"calibrate: point failed ({type(e).__name__}: {str(e).splitlines()[0][:200]})", file=sys.stderr)
        return math.nan, math.nan
    return r.ttft_ms, r.tpot_ms


class PointEvaluator:
    """Simulates a fixed list of points for a parameter set (optionally in worker processes)."""

    def __init__(self, points: Sequence[Point], fit_prompts: int = 4, processes: int = 1) -> None:
        self.points = list(points)
        self.counts = [_fit_counts(p, fit_prompts) for p in self.points]
        self.meas = np.array([[p.measured_ttft_ms, p.measured_tpot_ms] for p in self.points])
        self.weights = np.array([WORKLOAD_WEIGHT.get(p.row.get("workload", ""), 1.0) for p in self.points])
        self._pool = None
        if processes > 1 and len(self.points) > 1:
            import multiprocessing as mp

            self._pool = mp.get_context("fork").Pool(processes)
        self.evaluations = 0

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool.join()
            self._pool = None

    def predict(self, analytic: dict, frontend: dict) -> np.ndarray:
        jobs = [(p.config, analytic, frontend, n, w) for p, (n, w) in zip(self.points, self.counts)]
        out = self._pool.map(_eval_one, jobs, chunksize=1) if self._pool else [_eval_one(j) for j in jobs]
        self.evaluations += 1
        return np.array(out, dtype=float)

    def residuals(self, analytic: dict, frontend: dict) -> np.ndarray:
        pred = self.predict(analytic, frontend)
        with np.errstate(invalid="ignore", divide="ignore"):
            r = np.log(pred / self.meas)
        r[~np.isfinite(r)] = FAILED_RESIDUAL
        return (r * self.weights[:, None]).ravel()


def fit_params(evaluator: PointEvaluator, base: tuple[dict, dict], fit: Sequence[FitParam] = DEFAULT_FIT,
               start: dict[tuple[str, str], float] | None = None, max_nfev: int = 40,
               log: Callable[[str], None] | None = None) -> tuple[dict, dict, float]:
    """Least-squares fit of ``fit`` parameters on top of ``base`` (analytic, frontend) overrides.

    Returns the fitted (analytic, frontend) override dicts and the final RMS log-error.
    """
    from scipy.optimize import least_squares

    start = start or {}
    x0 = np.array([math.log(min(max(start.get((f.kind, f.name), f.start), f.lo), f.hi)) for f in fit])
    lo = np.array([math.log(f.lo) for f in fit])
    hi = np.array([math.log(f.hi) for f in fit])
    x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)

    def params_of(x: np.ndarray) -> tuple[dict, dict]:
        a, fe = dict(base[0]), dict(base[1])
        for f, v in zip(fit, x):
            (a if f.kind == "analytic" else fe)[f.name] = float(math.exp(v))
        return a, fe

    t0 = time.perf_counter()

    def fun(x: np.ndarray) -> np.ndarray:
        r = evaluator.residuals(*params_of(x))
        if log is not None:
            rms = float(np.sqrt(np.mean(r ** 2)))
            log(f"  eval {evaluator.evaluations:3d}  rms log-error {rms:.3f}  ({time.perf_counter() - t0:.0f} s)")
        return r

    res = least_squares(fun, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.3, diff_step=0.05,
                        max_nfev=max_nfev, x_scale=1.0)
    a, fe = params_of(res.x)
    rms = float(np.sqrt(np.mean(res.fun ** 2)))
    return a, fe, rms


def _take(points: list[Point], n: int, seed: int) -> list[Point]:
    if len(points) <= n:
        return list(points)
    idx = sorted(random.Random(seed).sample(range(len(points)), n))
    return [points[i] for i in idx]


def calibrate(points: Sequence[Point], sample: int | None = 24, seed: int = 0, fit_prompts: int = 4,
              min_group_points: int = 8, processes: int = 1, max_nfev: int = 40,
              fit: Sequence[FitParam] = DEFAULT_FIT, shared_sample: int | None = None,
              group_params: Sequence[str] | None = None,
              log: Callable[[str], None] | None = None, source: str = "") -> Calibration:
    """Fit a :class:`Calibration` (shared + per ``<gpu>/<engine>`` groups, ``<engine>`` the measured
    server: :attr:`Point.group`) to measured points.

    ``sample`` caps the points each fit simulates (seeded choice); ``None`` uses them all.
    ``group_params`` (names like ``mem_eff``) restricts the per-group fits to those
    parameters, the others keeping their shared values (cheaper, steadier on few points).
    """
    ok = [p for p in points if p.status == "ok"]
    if not ok:
        from servesim.errors import ConfigError

        raise ConfigError("calibrate: no supported points to fit (every point is unsupported)")
    say = log or (lambda s: None)
    groups: dict[str, list[Point]] = defaultdict(list)
    for p in ok:
        groups[p.group].append(p)
    # shared fit: stratified over groups
    n_shared = shared_sample if shared_sample is not None else (sample or len(ok))
    per_group = max(1, math.ceil(n_shared / len(groups)))
    shared_pts = [q for k in sorted(groups) for q in _take(groups[k], per_group, seed)]
    shared_pts = _take(shared_pts, n_shared, seed)
    say(f"shared fit on {len(shared_pts)} points from {len(groups)} group(s)")
    ev = PointEvaluator(shared_pts, fit_prompts, processes)
    try:
        sa, sf, rms = fit_params(ev, ({}, {}), fit, max_nfev=max_nfev, log=log)
    finally:
        ev.close()
    say(f"shared: rms log-error {rms:.3f}")
    cal = Calibration(shared={"analytic": sa, "frontend": sf},
                      meta={"fitted_on": source or f"{len(ok)} points",
                            "fit": {"sample": sample, "seed": seed, "fit_prompts": fit_prompts,
                                    "params": [f"{f.kind}.{f.name}" for f in fit],
                                    "shared_rms_log_error": round(rms, 4)}})
    start = {(f.kind, f.name): (sa if f.kind == "analytic" else sf)[f.name] for f in fit}
    for key in sorted(groups):
        pts = groups[key]
        if len(pts) < min_group_points:
            say(f"{key}: {len(pts)} point(s) < {min_group_points}: shared values")
            continue
        chosen = _take(pts, sample or len(pts), seed)
        say(f"{key}: fit on {len(chosen)} of {len(pts)} points")
        ev = PointEvaluator(chosen, fit_prompts, processes)
        try:
            gfit = [f for f in fit if group_params is None or f.name in group_params]
            base = ({f.name: start[(f.kind, f.name)] for f in fit if f.kind == "analytic" and f not in gfit},
                    {f.name: start[(f.kind, f.name)] for f in fit if f.kind == "frontend" and f not in gfit})
            ga, gf, grms = fit_params(ev, base, gfit, start=start, max_nfev=max_nfev, log=log)
        finally:
            ev.close()
        say(f"{key}: rms log-error {grms:.3f}")
        cal.groups[key] = {"analytic": ga, "frontend": gf}
        cal.meta["fit"].setdefault("group_rms_log_error", {})[key] = round(grms, 4)
    return cal
