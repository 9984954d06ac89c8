"""How far calibration.csv's own measurements of one deployment disagree, and the error floor
that puts under any simulator.

Several rows of ``calibration.csv`` measure the same deployment — model architecture, GPU,
engine, precision, parallel layout, concurrency, input and output lengths — in different runs
(another date, image or engine version, or one run copied into two sources).  A simulator
that gives one deployment one prediction (servesim does: the engine version aside, the same
deployment is the same input) cannot match runs that disagree: for each deployment the best
single prediction ``x`` minimises ``Σ |x / m_i − 1|`` over its runs ``m_i`` (a weighted median,
reached at one of the ``m_i``), and what is left is the **floor**: the least mean absolute
percentage error any such simulator can score on those rows.  Pooled over every row (a
deployment measured once has a floor of 0), it is the floor under the whole file's MAPE.

Printed for mean TTFT and mean TPOT: the floor over the rows of repeated deployments and over
all rows, by engine; and, for scale, the error of predicting one run by another run of the same
deployment (pairs of distinct runs).  ``--predictions`` scores servesim's predictions of the
same rows (``servesim validate --out`` or ``calibration_loo.py``'s ``*.real.csv``) beside the
floor.  Model names that differ only by checkpoint (DeepSeek-V3 / R1 / R1-0528, an NVIDIA
re-export) count as one architecture.

    python benchmarks/measurement_repeatability.py --points ../shared/data/measured/calibration.csv \\
        [--predictions FILE]
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys

import numpy as np
import pandas as pd

#: the deployment a row measures (besides its architecture)
DEPLOYMENT = ["system", "backend", "precision", "gpus", "attention_tp", "attention_dp", "moe_tp", "moe_ep",
              "concurrency", "isl", "osl"]
#: checkpoints of one architecture: the first of these a model name contains
ARCHITECTURES = ("DeepSeek", "Llama-3.1-70B", "Llama-3.1-8B", "gpt-oss", "Qwen3-32B", "Qwen3-235B", "Kimi", "GLM",
                 "MiniMax")
METRICS = {"ttft": "measured_mean_ttft_ms", "tpot": "measured_mean_tpot_ms"}


def architecture(model: str) -> str:
    for a in ARCHITECTURES:
        if a.lower() in model.lower():
            return a
    return re.sub(r"^.*/", "", model)


def best_single_errors(measured: np.ndarray) -> np.ndarray:
    """Each run's absolute percentage error under the one prediction that minimises their sum."""
    cand = measured[:, None] / measured[None, :] - 1.0  # [candidate x = m_j, run i]
    best = np.abs(cand).sum(axis=1).argmin()
    return np.abs(cand[best])


def deployments(points: pd.DataFrame):
    """The rows of each deployment (its architecture and :data:`DEPLOYMENT`), one frame each."""
    df = points.assign(arch=points.model.map(architecture))
    for _, group in df.groupby(["arch", *DEPLOYMENT], dropna=False):
        yield group


def floors(points: pd.DataFrame) -> pd.DataFrame:
    """Per row: its deployment's size and each metric's floor error."""
    parts = []
    for group in deployments(points):
        part = pd.DataFrame({"id": group.id.values, "backend": group.backend.values, "runs": len(group)})
        for name, col in METRICS.items():
            part[name] = best_single_errors(group[col].to_numpy(float))
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def run_pairs(points: pd.DataFrame) -> pd.DataFrame:
    """Ordered pairs of distinct runs of one deployment: the error of predicting one by the other."""
    rows = []
    for group in deployments(points):
        for a, b in itertools.permutations(group.itertuples(index=False), 2):
            errs = {n: abs(getattr(b, c) / getattr(a, c) - 1.0) for n, c in METRICS.items()}
            if any(errs.values()):  # not one run copied into two sources
                rows.append({"id": a.id, "backend": a.backend, **errs})
    return pd.DataFrame(rows, columns=["id", "backend", *METRICS])


def prediction_errors(path: str, points: pd.DataFrame) -> pd.DataFrame:
    """Absolute TTFT / TPOT errors per row id of a file of servesim's predictions."""
    df = pd.read_csv(path)
    if "status" in df:
        df = df[df.status == "ok"]
    cols = ("predicted_mean_ttft_ms", "predicted_mean_tpot_ms") if "predicted_mean_ttft_ms" in df \
        else ("ttft_ms", "tpot_ms")
    m = points.set_index("id").loc[df.id]
    return pd.DataFrame({"id": df.id.values,
                         "ttft": np.abs(df[cols[0]].to_numpy() / m[METRICS["ttft"]].to_numpy() - 1.0),
                         "tpot": np.abs(df[cols[1]].to_numpy() / m[METRICS["tpot"]].to_numpy() - 1.0)})


def _line(label: str, errs: pd.DataFrame) -> str:
    return (f"{label:<34} {len(errs):>5}  {100 * errs.ttft.mean():6.1f}%  {100 * errs.ttft.median():6.1f}%  "
            f"{100 * errs.tpot.mean():6.1f}%  {100 * errs.tpot.median():6.1f}%")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", required=True, help="calibration.csv")
    ap.add_argument("--predictions", help="servesim's predictions of the rows (validate --out or a *.real.csv)")
    args = ap.parse_args(argv)
    points = pd.read_csv(args.points)
    fl = floors(points)
    rep = fl[fl.runs > 1]
    print(f"{'':<34} {'rows':>5}  {'TTFT MAPE':>7} {'median':>7}  {'TPOT MAPE':>7} {'median':>7}")
    print(_line("floor, repeated deployments", rep))
    for backend, g in rep.groupby("backend"):
        print(_line(f"  {backend}", g))
    print(_line("floor, all rows", fl))
    print(_line("one run predicted by another (pairs)", run_pairs(points)))
    if args.predictions:
        pred = prediction_errors(args.predictions, points)
        print(_line("servesim, repeated deployments", pred[pred.id.isin(rep.id)]))
        print(_line("servesim, all rows", pred))
    return 0


if __name__ == "__main__":
    sys.exit(main())
