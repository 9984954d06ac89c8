"""A sweep's files: the journal (one JSON line per finished candidate, appended and flushed as
each ends, which is what makes a sweep resumable), candidates.parquet (the table, rewritten
whole and atomically from the journal) and sweep.json."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from servesim.errors import ConfigError
from servesim.plan.candidate import METRIC_COLUMNS, params_key

JOURNAL = "candidates.jsonl"
TABLE = "candidates.parquet"
SWEEP_JSON = "sweep.json"


def read_journal(out_dir: Path) -> list[dict]:
    """Rows already finished; a last line cut by an interruption is ignored."""
    path = out_dir / JOURNAL
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line half-written when the sweep was stopped
    return rows


class Journal:
    """Appends each finished row and flushes it to disk at once."""

    def __init__(self, out_dir: Path) -> None:
        self._f = open(out_dir / JOURNAL, "a", encoding="utf-8")

    def append(self, row: dict) -> None:
        self._f.write(json.dumps(row, sort_keys=True, default=_json_default) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(type(o).__name__)


def check_resumable(out_dir: Path, spec_doc: dict) -> None:
    """A folder with an earlier sweep must hold the same spec and base config to be resumed."""
    path = out_dir / SWEEP_JSON
    if not path.exists():
        return
    old = json.loads(path.read_text())
    if old.get("resume_key") != spec_doc["resume_key"]:
        raise ConfigError(f"{out_dir}: holds a different sweep (its spec or base config differ); "
                          "choose another output folder (--out) or remove it")


def _column(values: list[Any]) -> pa.Array:
    """One param column: its values as they are when they share a plain type, else JSON text."""
    kinds = {type(v) for v in values if v is not None}
    if kinds <= {int} or kinds <= {int, float} or kinds <= {str} or kinds <= {bool}:
        return pa.array(values)
    return pa.array([None if v is None else json.dumps(v, sort_keys=True) for v in values])


def write_table(rows: Iterable[dict], path: Path, keys: list[str], pareto: list[bool],
                pareto_cost: list[bool]) -> None:
    """candidates.parquet: the columns of docs/planning.md, one row per candidate (by id)."""
    rows = list(rows)
    nan = math.nan
    cols: dict[str, Any] = {
        "candidate": pa.array([int(r["candidate"]) for r in rows], pa.int64()),
        "status": pa.array([r["status"] for r in rows], pa.string()),
        "reason": pa.array([r.get("reason", "") for r in rows], pa.string()),
    }
    for k in keys:
        cols[f"param.{k}"] = _column([r["params"].get(k) for r in rows])
    cols["gpus"] = pa.array([r.get("gpus") for r in rows], pa.int64())
    for m in METRIC_COLUMNS:
        cols[m] = pa.array([float(r[m]) if r.get(m) is not None else nan for r in rows], pa.float64())
    cols["slo_met"] = pa.array([bool(r.get("slo_met", False)) for r in rows])
    cols["overloaded"] = pa.array([bool(r.get("overloaded", False)) for r in rows])
    cols["pareto"] = pa.array(pareto)
    cols["pareto_cost"] = pa.array(pareto_cost)
    part = path.with_name(path.name + ".part")
    pq.write_table(pa.table(cols), part, compression="zstd")
    os.replace(part, path)


def write_json_atomic(doc: dict, path: Path) -> None:
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(doc, indent=2, default=_json_default) + "\n")
    os.replace(part, path)


def by_key(rows: list[dict]) -> dict[str, dict]:
    return {params_key(r["params"]): r for r in rows}
