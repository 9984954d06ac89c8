"""Measure a sensitivities table of calibration.csv in stratified, resumable chunks.

``servesim calibrate --method sensitivity --sensitivities FILE`` measures every point in one go
and writes the table at the end.  On a few busy cores that is an hour of simulation with nothing
usable before it ends.  This script measures the same table (same columns, readable by
``servesim calibrate --sensitivities`` and ``servesim validate --cv``) in chunks written as they
finish, in an order that covers every ``<gpu>/<engine>/<model>@<precision>`` group early (one
point of each group, then a second of each, ...), so a table cut short is still a fair sample
of every group.  ``--reduced`` runs the knobs' variants at reduced prompt counts
(:func:`servesim.validate.sensitivity.reduced_counts`) against a reduced base of their own;
the base prediction stays at full counts.

``--rebase-from DIR`` re-measures only the base run of every point of the tables in DIR (one
full-count run per point, at the point's recorded base values) and keeps its slopes: after a
change of the step-time or engine model, the base predictions move much more than their
slopes, so this is the fastest faithful update of a table (``--backends`` limits it to the
rows a change can affect; the others are copied).

    python benchmarks/measure_sensitivities.py --points ../shared/data/measured/calibration.csv \\
        --base-calibration default --out-dir sens/ --processes 2 --reduced
    # then: cat the chunks into one table (one header), or pass the folder to --sensitivities
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections import defaultdict
from pathlib import Path

from servesim.perf.calibration import load_calibration, precision_key
from servesim.validate.points import Point, load_points
from servesim.validate.sensitivity import (DEFAULT_BASE, BaseParams, _run_jobs, measure_sensitivities, physical_base,
                                           write_sensitivities)


def stratified_order(points: list[Point]) -> list[Point]:
    """Points interleaved across model groups: the first of every group, then the second, ...
    (within a group, in an order fixed by a hash of the id)."""
    groups: dict[str, list[Point]] = defaultdict(list)
    for p in points:
        groups[f"{p.group}/{p.model}@{precision_key(p.precision)}"].append(p)
    for pts in groups.values():
        pts.sort(key=lambda p: hashlib.sha256(p.id.encode()).hexdigest())
    out: list[Point] = []
    depth = max(map(len, groups.values()), default=0)
    for i in range(depth):
        out.extend(pts[i] for _, pts in sorted(groups.items()) if i < len(pts))
    return out


def rebase(args) -> None:
    """Re-measure the base runs of the tables in ``args.rebase_from`` into ``args.out_dir``."""
    from servesim.validate.crossval import read_tables

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    points = load_points(args.points)
    sens = [s for s in read_tables(args.rebase_from, points) if s.status == "ok"]
    backends = set(args.backends.split(",")) if args.backends else None
    todo = [s for s in sens if backends is None or s.point.backend in backends]
    print(f"{len(todo)} of {len(sens)} points: base runs", flush=True)
    t0 = time.perf_counter()
    for k in range(0, len(todo), args.chunk):
        chunk = todo[k:k + args.chunk]
        jobs = [(s.point, {"base": (s.base or DEFAULT_BASE).variants()["base"]}) for s in chunk]
        for s, (status, runs) in zip(chunk, _run_jobs(jobs, args.processes, None)):
            if status != "ok":
                s.status = status
                continue
            s.ttft_base, s.tpot_base, s.first_token_running = runs["base"]
        print(f"{min(k + args.chunk, len(todo))}/{len(todo)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    write_sensitivities(sens, out / "rebased.csv")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", required=True)
    ap.add_argument("--split", choices=("fit", "holdout"))
    ap.add_argument("--base-calibration", help="simulate each point around the values this calibration gives it")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--chunk", type=int, default=60, help="points per chunk file (default 60)")
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--reduced", action="store_true", help="knob variants at reduced prompt counts")
    ap.add_argument("--rebase-from", help="re-measure only the base runs of these tables' points")
    ap.add_argument("--backends", help="with --rebase-from: only rows of these backends (comma-separated)")
    args = ap.parse_args()
    if args.rebase_from:
        rebase(args)
        return
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    points = stratified_order([p for p in load_points(args.points, split=args.split)])
    if args.base_calibration:
        cal = load_calibration(args.base_calibration)

        def base(p: Point) -> BaseParams:
            return BaseParams.for_point(cal, p)
    else:
        base = physical_base()
    t0 = time.perf_counter()
    for k in range(0, len(points), args.chunk):
        path = out / f"chunk{k // args.chunk:03d}.csv"
        if path.exists():
            continue
        chunk = points[k:k + args.chunk]
        sens = measure_sensitivities(chunk, base, processes=args.processes, reduced=args.reduced)
        write_sensitivities(sens, path.with_suffix(".tmp"))
        path.with_suffix(".tmp").rename(path)
        print(f"{path}: {min(k + args.chunk, len(points))}/{len(points)} points ({time.perf_counter() - t0:.0f} s)",
              flush=True)


if __name__ == "__main__":
    main()
