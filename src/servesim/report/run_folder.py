"""Reading what a report shows: a ``servesim predict`` output folder or a sweep folder.

A run folder holds ``prediction.json`` (the summary), ``requests.parquet`` (one row per
request) and, unless turned off, ``timeseries.parquet`` (per worker over time).  A sweep
folder holds ``candidates.parquet`` (one row per candidate deployment: status, swept
``param.*`` values, throughput, latency, goodput, cost, ``pareto``) and ``sweep.json``.
Nothing here draws: the figures are built from these records by ``report/html_figures.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servesim.errors import ServesimError

#: requests.parquet columns the report reads (extra disaggregation columns are read when present).
REQUEST_COLUMNS = ("worker", "warmup", "status", "arrival_s", "finish_s", "ttft_s", "tpot_s", "e2e_s",
                   "queue_s", "retractions", "generated_tokens", "input_length", "cached_tokens")
SWEEP_FILES = ("candidates.parquet", "sweep.json")


class ReportError(ServesimError):
    """A folder cannot be reported on (missing or foreign files, or nothing to draw)."""


@dataclass
class RunData:
    """One run's files, as arrays."""

    path: Path
    label: str
    prediction: dict
    requests: dict[str, np.ndarray]
    timeseries: dict[str, np.ndarray] | None

    @property
    def summary(self) -> dict:
        return self.prediction.get("summary", {})

    @property
    def completed(self) -> np.ndarray:
        """Completed, measured (non-warm-up) requests: the summary's latency population."""
        r = self.requests
        return (r["status"] == "completed") & ~r["warmup"].astype(bool)


@dataclass
class SweepData:
    """A sweep folder: one row per candidate deployment, and the sweep's own description."""

    path: Path
    label: str
    candidates: dict[str, np.ndarray]
    meta: dict

    @property
    def params(self) -> list[str]:
        return [c for c in self.candidates if c.startswith("param.")]


def is_sweep(path: Path) -> bool:
    return (path / SWEEP_FILES[0]).is_file()


def _parquet(path: Path, columns: list[str] | None = None,
             optional: tuple[str, ...] | None = ()) -> dict[str, np.ndarray]:
    """``path``'s columns: ``columns`` (required) and those of ``optional`` it has; every column
    when ``optional`` is None."""
    import pyarrow.parquet as pq

    try:
        have = set(pq.read_schema(path).names)
    except OSError as exc:
        raise ReportError(f"{path}: cannot read ({exc})") from None
    if columns is not None:
        missing = [c for c in columns if c not in have]
        if missing:
            raise ReportError(f"{path}: missing column(s) {missing}; is it a servesim output file?")
        if optional is not None:
            columns = list(columns) + [c for c in optional if c in have]
        else:  # every column, the required ones checked
            columns = None
    table = pq.read_table(path, columns=columns)
    return {c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names}


def _json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise ReportError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ReportError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ReportError(f"{path}: expected a JSON object")
    return doc


def _unique_labels(paths: list[Path]) -> list[str]:
    """Folder names, made unique by their parents where two runs share a name."""
    labels = [p.name or str(p) for p in paths]
    if len(set(labels)) < len(labels):
        labels = [f"{p.parent.name}/{p.name}" if p.parent.name else str(p) for p in paths]
    if len(set(labels)) < len(labels):
        labels = [f"{i + 1}: {lab}" for i, lab in enumerate(labels)]
    return labels


def load_run(path: Path, label: str) -> RunData:
    """A ``servesim predict`` output folder (prediction.json and requests.parquet needed)."""
    if not (path / "prediction.json").is_file():
        raise ReportError(f"{path}: no prediction.json; expected a `servesim predict` output folder or a "
                          "sweep folder (candidates.parquet)")
    if not (path / "requests.parquet").is_file():
        raise ReportError(f"{path}: no requests.parquet (the run had output.requests: false); "
                          "the report's distributions need it")
    prediction = _json(path / "prediction.json")
    requests = _parquet(path / "requests.parquet", list(REQUEST_COLUMNS),
                        optional=("decode_worker", "prefill_start_s", "prefill_end_s"))
    ts_path = path / "timeseries.parquet"
    timeseries = _parquet(ts_path) if ts_path.is_file() else None
    return RunData(path=path, label=label, prediction=prediction, requests=requests, timeseries=timeseries)


#: candidates.parquet columns the sweep figures read.
CANDIDATE_COLUMNS = ("candidate", "status", "reason", "gpus", "throughput_per_gpu_tok_s", "per_user_tok_s",
                     "pareto")


def load_sweep(path: Path, label: str) -> SweepData:
    """A sweep folder: ``candidates.parquet`` and ``sweep.json``."""
    if not (path / "sweep.json").is_file():
        raise ReportError(f"{path}: candidates.parquet without sweep.json; is it a `servesim sweep` folder?")
    return SweepData(path=path, label=label, candidates=_parquet(path / "candidates.parquet", list(CANDIDATE_COLUMNS), optional=None),
                     meta=_json(path / "sweep.json"))


def load_folders(paths: list[str | Path]) -> tuple[list[RunData], list[SweepData]]:
    """Every folder given, as runs and sweeps (in the order given)."""
    folders = [Path(p) for p in paths]
    for p in folders:
        if not p.is_dir():
            raise ReportError(f"{p}: no such folder (expected a `servesim predict` output folder or a sweep folder)")
    runs, sweeps = [], []
    for p, label in zip(folders, _unique_labels(folders)):
        if is_sweep(p):
            sweeps.append(load_sweep(p, label))
        else:
            runs.append(load_run(p, label))
    return runs, sweeps
