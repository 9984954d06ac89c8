"""Output files: prediction.json, requests.parquet, timeseries.parquet."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from servesim.metrics.recorder import RequestRecorder, Status
from servesim.metrics.summary import request_latencies

STATUS_NAMES = {int(s): s.name.lower() for s in Status}


def request_table(rec: RequestRecorder) -> pa.Table:
    """One row per request; times in seconds of virtual time (see docs/outputs.md)."""
    c = rec.column
    lat = request_latencies(rec)
    cols = {
        "request_id": pa.array(rec.request_id, type=pa.string()),
        "session_id": pa.array(rec.session_id, type=pa.string()),
        "turn": c("turn"),
        "worker": c("worker"),
        "warmup": np.asarray(rec.warmup, dtype=bool),
        "arrival_s": c("arrival"),
        "first_scheduled_s": c("first_scheduled"),
        "first_token_s": c("first_token"),
        "second_token_s": c("second_token"),
        "last_token_s": c("last_token"),
        "finish_s": c("finish"),
        "input_length": c("input_length"),
        "output_length": c("output_length"),
        "generated_tokens": c("generated"),
        "cached_tokens": c("cached_tokens"),
        "host_cached_tokens": c("host_cached_tokens"),
        "ttft_s": lat["ttft"],
        "ttst_s": lat["ttst"],
        "tpot_s": lat["tpot"],
        "mean_itl_s": lat["mean_itl"],
        "e2e_s": lat["e2e"],
        "queue_s": lat["queue"],
        "retractions": c("retractions"),
        "status": pa.array([STATUS_NAMES[int(s)] for s in c("status")], type=pa.string()),
        "reason": pa.array(rec.reason, type=pa.string()),
    }
    for name, col in rec.extra_columns.items():
        cols[name] = col.data[: rec.size]
    return pa.table(cols)


def write_parquet(table: pa.Table, path: Path) -> None:
    # No statistics timestamps or writer metadata that vary run to run: files are byte-identical.
    pq.write_table(table, path, compression="zstd", write_statistics=True)


def write_json(obj: dict, path: Path) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
