"""How often the measured value falls inside the error band ``predict`` reports.

Run after a validation of held-out rows, e.g.::

    servesim validate --points ../shared/data/measured/calibration.csv --split holdout \\
        --calibration fit-split --processes 2 --out holdout.csv
    PYTHONPATH=src python benchmarks/interval_coverage.py --points ../shared/data/measured/calibration.csv \\
        --results holdout.csv --calibration fit-split

For every simulated row, the band is the one ``predict`` would print for that deployment
(:meth:`Calibration.error_band`: its situation — model calibrated on its GPU/engine, model
not, GPU not — and closest group); the row is covered when its relative error
(predicted − measured) / measured lies inside the band.  A band written for 80% coverage
should cover about 80% of rows the calibration did not see.
"""

from __future__ import annotations

import argparse
import csv
import math
from collections import Counter

from servesim.perf.calibration import load_calibration
from servesim.validate.points import load_points


def coverage(points_csv: str, results_csv: str, calibration: str) -> dict:
    cal = load_calibration(calibration)
    points = {p.id: p for p in load_points(points_csv)}
    hits = {"ttft": [], "tpot": []}
    situations: Counter = Counter()
    with open(results_csv, newline="") as f:
        for row in csv.DictReader(f):
            p = points.get(row["id"])
            if p is None or row["status"] != "ok":
                continue
            engine = p.group.split("/")[1]
            band = cal.error_band(row["system"], engine, row["model"], row["precision"] or None)
            if band is None:
                continue
            situations[band["situation"]] += 1
            for m in hits:
                pred, meas = float(row[f"predicted_mean_{m}_ms"]), float(row[f"measured_mean_{m}_ms"])
                if math.isfinite(pred) and meas > 0:
                    hits[m].append(band[f"{m}_lo"] <= pred / meas - 1.0 <= band[f"{m}_hi"])
    return {"nominal": cal.intervals.get("coverage"), "situations": dict(situations),
            **{m: sum(v) / len(v) if v else float("nan") for m, v in hits.items()},
            "rows": len(hits["ttft"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", required=True)
    ap.add_argument("--results", required=True, help="servesim validate --out CSV")
    ap.add_argument("--calibration", default="fit-split")
    a = ap.parse_args()
    c = coverage(a.points, a.results, a.calibration)
    print(f"{c['rows']} rows {c['situations']}: TTFT inside its band {100 * c['ttft']:.1f}%, "
          f"TPOT {100 * c['tpot']:.1f}% (bands written for {100 * (c['nominal'] or 0):.0f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
