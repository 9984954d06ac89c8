"""How much repeated measurements of one configuration disagree: the floor under any model's error.

calibration.csv holds several rows for some configurations (same model, GPU, engine,
precision, layout, concurrency, lengths and workload), measured on different dates or
images.  For each such configuration this prints how far each row lies from the
configuration's mean (mean absolute relative deviation), and the MAPE one run would score
as a "prediction" of another run of the same configuration.  A simulator that predicts
the expected value perfectly still scores about the first figure on held-out rows.

    python benchmarks/measurement_noise.py --points ../shared/data/measured/calibration.csv
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from itertools import permutations
from statistics import mean

KEY = ("model", "system", "backend", "precision", "gpus", "moe_ep", "attention_dp", "concurrency", "isl", "osl",
       "workload")
METRICS = ("measured_mean_ttft_ms", "measured_mean_tpot_ms")


def repeated_configurations(path: str) -> list[list[dict[str, str]]]:
    """Rows grouped by configuration, keeping only configurations measured more than once."""
    groups: dict[tuple, list[dict[str, str]]] = defaultdict(list)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            groups[tuple(row[k] for k in KEY)].append(row)
    return [rows for rows in groups.values() if len(rows) > 1]


def spread(groups: list[list[dict[str, str]]], metric: str) -> tuple[float, float]:
    """(mean |x / group mean − 1| over rows, mean |x_i / x_j − 1| over ordered pairs of a group)."""
    to_mean, pairwise = [], []
    for rows in groups:
        values = [float(r[metric]) for r in rows]
        m = mean(values)
        to_mean += [abs(v / m - 1) for v in values]
        pairwise += [abs(a / b - 1) for a, b in permutations(values, 2)]
    return mean(to_mean), mean(pairwise)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", required=True, help="a CSV in the calibration.csv schema")
    args = ap.parse_args()
    groups = repeated_configurations(args.points)
    print(f"{len(groups)} configurations measured more than once ({sum(map(len, groups))} rows)")
    for metric in METRICS:
        to_mean, pairwise = spread(groups, metric)
        print(f"{metric}: rows deviate {to_mean:.1%} from their configuration's mean; "
              f"one run 'predicting' another scores {pairwise:.1%} MAPE")


if __name__ == "__main__":
    main()
