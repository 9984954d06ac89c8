"""``servesim validate`` and ``servesim calibrate`` subcommands (wired by servesim.cli)."""

from __future__ import annotations

import argparse
import sys
import time

from servesim.errors import ConfigError
from servesim.perf.calibration import MIN_GROUP_POINTS


def add_subcommands(sub) -> None:
    v = sub.add_parser("validate", help="simulate measured benchmark points and score the predictions")
    v.add_argument("--points", required=True, help="measured points CSV (calibration.csv schema)")
    v.add_argument("--sample", type=int, help="simulate N points picked deterministically (seeded)")
    v.add_argument("--seed", type=int, default=0, help="seed of --sample (default 0)")
    v.add_argument("--split", choices=("fit", "holdout"),
                   help="only the fit (~60%%, by id hash) or held-out (~40%%) rows of the file")
    v.add_argument("--out", help="write one row per point to this CSV")
    v.add_argument("--calibration", help="calibration YAML, or a bundled one by name: default (all rows), "
                                         "fit-split (fit rows only; default: default)")
    v.add_argument("--markdown", action="store_true", help="print the score table as Markdown")
    v.add_argument("--plot", metavar="PNG", help="also draw predicted against measured TTFT and TPOT into this "
                                                 "PNG (needs --out; pip install 'servesim[plot]')")
    v.add_argument("--perf-model", choices=("analytic", "aic"), default="analytic",
                   help="step-time model: analytic (calibrated, default) or aic (measured operator tables, "
                        "pip install 'servesim[aic]'; the calibration's frontend values still apply)")
    v.add_argument("--processes", type=int, default=1, help="worker processes (default 1)")
    v.add_argument("--quiet", "-q", action="store_true", help="no per-point progress")
    v.add_argument("--cv", choices=("family", "gpu", "split", "all"),
                   help="cross-validate the calibration procedure instead: hold out each model family (or GPU) "
                        "in turn, refit on the rest from --sensitivities, score the held-out rows (split: fit on "
                        "the fit rows, score the held-out ones; all: the three and the in-sample fit)")
    v.add_argument("--sensitivities", help="with --cv: a sensitivities table (servesim calibrate --sensitivities, "
                                           "or a folder of chunks from benchmarks/measure_sensitivities.py)")
    v.add_argument("--simulate", action="store_true",
                   help="with --cv: score each held-out row by simulating it for real under its fold's refit, "
                        "not on the table's linear surrogate (every row runs once per kind; use --processes)")
    v.set_defaults(handler=cmd_validate)

    c = sub.add_parser("calibrate", help="fit step-time efficiencies and frontend parameters to measured points")
    c.add_argument("--points", required=True, help="measured points CSV (calibration.csv schema)")
    c.add_argument("--out", default="calibration.yaml", help="calibration YAML to write (default calibration.yaml)")
    c.add_argument("--method", choices=("sensitivity", "direct"), default="sensitivity",
                   help="sensitivity (default): simulate every point at full prompt counts at a base and one "
                        "variant per knob, then fit shared, GPU/engine and model groups against that linear "
                        "surrogate; direct: least squares re-simulating sampled points at reduced counts")
    c.add_argument("--sensitivities", help="sensitivity method: CSV of per-point sensitivities; "
                                           "read if it exists (no simulation), else written")
    c.add_argument("--base-calibration", help="sensitivity method: a previous calibration; each point is "
                                              "simulated around the values it gives that point (a second "
                                              "round, default: one built-in base for all points)")
    c.add_argument("--no-intervals", action="store_true",
                   help="sensitivity method: skip the cross-validated error bands (the file's intervals: "
                        "section, which predict reports as the expected error)")
    c.add_argument("--min-model-points", type=int,
                   help="sensitivity method: model groups need this many points (default 3)")
    c.add_argument("--split", choices=("fit", "holdout"),
                   help="only the fit (~60%%, by id hash) or held-out (~40%%) rows of the file")
    c.add_argument("--min-group-points", type=int, default=MIN_GROUP_POINTS,
                   help=f"groups with fewer supported points use the shared fit (default {MIN_GROUP_POINTS})")
    c.add_argument("--sample", type=int, help="direct method: points per fit (default 24)")
    c.add_argument("--shared-sample", type=int, help="direct method: points of the shared fit (default: --sample)")
    c.add_argument("--group-params",
                   help="direct method: comma-separated parameters the per-group fits move (default: all)")
    c.add_argument("--seed", type=int, help="direct method: seed of the point sample (default 0)")
    c.add_argument("--fit-prompts", type=int,
                   help="direct method: simulate this many x concurrency prompts per point (default 4)")
    c.add_argument("--max-evals", type=int, help="direct method: simulation sweeps per fit (default 40)")
    c.add_argument("--processes", type=int, default=1, help="worker processes (default 1)")
    c.add_argument("--quiet", "-q", action="store_true")
    c.set_defaults(handler=cmd_calibrate)


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cmd_cross_validate(args: argparse.Namespace) -> int:
    """``servesim validate --cv``: the leave-one-out figures from a sensitivities table."""
    _require_scipy()
    from servesim.validate.crossval import cross_validate, in_sample, read_tables, simulated_fold, surrogate_fold
    from servesim.validate.groupfit import fit_shipped as fit
    from servesim.validate.points import load_points

    if not args.sensitivities:
        raise ConfigError("validate --cv refits the calibration from per-point sensitivities: give --sensitivities "
                          "TABLE.csv (written by servesim calibrate --method sensitivity --sensitivities TABLE.csv)")
    if args.split or args.sample:
        raise ConfigError("validate --cv uses every row of --points (it holds folds out itself): drop --split/--sample")
    points = load_points(args.points)
    sens = read_tables(args.sensitivities, points)
    log = (lambda m: None) if args.quiet else _err
    predict, how = (simulated_fold(args.processes), "simulated") if args.simulate else (surrogate_fold, "surrogate")
    kinds = ("family", "gpu", "split") if args.cv == "all" else (args.cv,)
    for kind in kinds:
        res = cross_validate(sens, kind, fit, predict=predict, say=log)
        title = {"family": "leave one model family out", "gpu": "leave one GPU out",
                 "split": "random split (fit rows → held-out rows)"}[kind]
        print(f"\n{title} ({how}; {res.score()['n']} held-out points{_unpriced(res)})")
        print(res.format(markdown=args.markdown))
        if args.out:
            _write_cv_rows(res, args.out if len(kinds) == 1 else f"{args.out}.{kind}.csv")
    if args.cv == "all":
        res = in_sample(sens, fit, predict=predict)
        print(f"\nin sample ({how}; {res.score()['n']} points{_unpriced(res)})")
        print(res.format(markdown=args.markdown))
    return 0


def _unpriced(res) -> str:
    """The title's note of held-out points whose simulation failed (left out of the scores)."""
    return f"; {len(res.unpriced)} not simulated: {', '.join(res.unpriced[:5])}" if res.unpriced else ""


def _write_cv_rows(res, path: str) -> None:
    import csv

    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "held_out", "group", "measured_ttft_ms", "measured_tpot_ms", "ttft_ms", "tpot_ms",
                    "ttft_err", "tpot_err"])
        for r in res.rows:
            w.writerow([r.id, r.fold, r.group, r.measured_ttft_ms, r.measured_tpot_ms, f"{r.ttft_ms:.6g}",
                        f"{r.tpot_ms:.6g}", f"{r.ttft_err:.5f}", f"{r.tpot_err:.5f}"])


def cmd_validate(args: argparse.Namespace) -> int:
    if args.cv:
        return cmd_cross_validate(args)
    if args.sensitivities:
        raise ConfigError("validate --sensitivities only applies with --cv")
    if args.simulate:
        raise ConfigError("validate --simulate only applies with --cv (without it every row is simulated anyway)")
    from servesim.perf.calibration import load_calibration
    from servesim.validate.points import load_points
    from servesim.validate.run import format_report, validate_points, write_rows

    if args.plot:
        if not args.out:
            raise ConfigError("validate --plot draws from the results file: give --out results.csv too")
        from servesim.report.plots import require_matplotlib

        require_matplotlib()  # before the run, not after it
    cal = load_calibration(args.calibration)
    points = load_points(args.points, args.sample, args.seed, split=args.split)
    t0 = time.perf_counter()

    def progress(i: int, n: int, row) -> None:
        if not args.quiet:
            _err(f"[{i}/{n}] {row.point.id}: {row.status} ({row.host_seconds:.1f} s)")

    rows = validate_points(points, cal, progress, processes=args.processes, perf_model=args.perf_model)
    if args.out:
        write_rows(rows, args.out)
    print(format_report(rows, markdown=args.markdown))
    print(f"\n{len(rows)} points in {time.perf_counter() - t0:.0f} s" + (f"; rows in {args.out}" if args.out else ""))
    if args.plot:
        from servesim.report.plots import plot_validation

        print(f"figure in {plot_validation(args.out, args.plot)}")
    return 0


#: Flags of one method only, with their defaults: given with the other method they would do nothing.
DIRECT_ONLY = {"sample": 24, "shared_sample": None, "group_params": None, "seed": 0, "fit_prompts": 4,
               "max_evals": 40}
SENSITIVITY_ONLY = {"sensitivities": None, "base_calibration": None, "min_model_points": 3}
# (--no-intervals is a plain switch: False with either method)


def _check_method_flags(args: argparse.Namespace) -> None:
    """Refuse flags the chosen method ignores, and fill in the defaults of its own."""
    own, other = (SENSITIVITY_ONLY, DIRECT_ONLY) if args.method == "sensitivity" else (DIRECT_ONLY, SENSITIVITY_ONLY)
    stray = [f"--{k.replace('_', '-')}" for k in other if getattr(args, k) is not None]
    if stray:
        other_method = "direct" if args.method == "sensitivity" else "sensitivity"
        raise ConfigError(f"calibrate --method {args.method}: {', '.join(stray)} only apply to --method "
                          f"{other_method}; drop them or add --method {other_method}")
    for k, default in own.items():
        if getattr(args, k) is None:
            setattr(args, k, default)


def _require_scipy() -> None:
    """Both fitting methods solve with scipy's least squares, an optional dependency."""
    try:
        import scipy.optimize  # noqa: F401
    except ImportError:
        raise ConfigError("servesim calibrate needs scipy: pip install 'servesim[calibrate]'") from None


def cmd_calibrate(args: argparse.Namespace) -> int:
    from pathlib import Path

    _check_method_flags(args)
    _require_scipy()
    if args.method == "sensitivity":
        return _calibrate_sensitivity(args)
    from servesim.validate.calibrate import calibrate
    from servesim.validate.points import load_points
    from servesim.validate.run import check_point

    points = [check_point(p) for p in load_points(args.points, split=args.split)]
    log = None if args.quiet else _err
    cal = calibrate(points, sample=args.sample, seed=args.seed, fit_prompts=args.fit_prompts,
                    min_group_points=args.min_group_points, processes=args.processes, max_nfev=args.max_evals,
                    shared_sample=args.shared_sample,
                    group_params=args.group_params.split(",") if args.group_params else None,
                    log=log, source=f"{Path(args.points).name} ({sum(p.status == 'ok' for p in points)} "
                                    f"supported points)")
    cal.save(args.out)
    print(f"wrote {args.out}")
    return 0


def _calibrate_sensitivity(args: argparse.Namespace) -> int:
    from pathlib import Path

    from servesim.perf.calibration import load_calibration
    from servesim.validate.groupfit import fit_hierarchy
    from servesim.validate.points import load_points
    from servesim.validate.sensitivity import (BaseParams, measure_missing_knobs, physical_base,
                                               measure_sensitivities, read_sensitivities, write_sensitivities)

    points = load_points(args.points, split=args.split)
    # measured around the physical values unless told otherwise; fitted with their ratios
    base, point_base = physical_base(), None
    if args.base_calibration:
        previous = load_calibration(args.base_calibration)

        def point_base(p):
            return BaseParams.for_point(previous, p)
    log = (lambda m: None) if args.quiet else _err
    t0 = time.perf_counter()

    def progress(i: int, n: int) -> None:
        if i % 10 == 0 or i == n:
            log(f"[{i}/{n}] simulated ({time.perf_counter() - t0:.0f} s)")

    if args.sensitivities and Path(args.sensitivities).is_dir():  # chunks of benchmarks/measure_sensitivities.py
        from servesim.validate.crossval import read_tables

        log(f"reading sensitivities from the tables in {args.sensitivities}")
        sens = read_tables(args.sensitivities, points)
    elif args.sensitivities and Path(args.sensitivities).exists():
        log(f"reading sensitivities from {args.sensitivities}")
        sens = read_sensitivities(args.sensitivities, points)
        missing = sorted({k for s in sens if s.status == "ok" for k in s.missing_knobs})
        if missing:
            log(f"{args.sensitivities} has no slopes for the {', '.join(missing)} knob(s): measuring them "
                f"(a base run and one run per missing knob for each point), then adding them to the file")
            measure_missing_knobs(sens, processes=args.processes, progress=progress)
            write_sensitivities(sens, args.sensitivities, keep_other_rows=True)
    else:
        sens = measure_sensitivities(points, point_base or base, processes=args.processes, progress=progress)
        if args.sensitivities:
            write_sensitivities(sens, args.sensitivities)
    def fit(rows):
        return fit_hierarchy(rows, base, min_group_points=args.min_group_points,
                             min_model_points=args.min_model_points)

    cal = fit_hierarchy(sens, base, min_group_points=args.min_group_points,
                        min_model_points=args.min_model_points, say=log)
    if not args.no_intervals:
        from servesim.validate.crossval import error_bands

        log("error bands: refitting without each half, model family and GPU in turn (surrogate)")
        cal.intervals = error_bands(sens, fit)
    cal.meta["fitted_on"] = f"{Path(args.points).name}" + (f" ({args.split} split)" if args.split else "")
    cal.meta["fit"]["base"] = base.describe()
    cal.save(args.out)
    print(f"wrote {args.out}")
    return 0
