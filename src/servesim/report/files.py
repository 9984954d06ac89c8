"""Output files: prediction.json, requests.parquet, timeseries.parquet."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from servesim.metrics.recorder import RequestRecorder, Status
from servesim.metrics.summary import request_latencies
from servesim.report.arrow import string_array, table

STATUS_NAMES = {int(s): s.name.lower() for s in Status}


#: Rows per row group of requests.parquet: the file is written one slice at a time, so a
#: run of a million requests never holds its whole table in Arrow form next to the recorder.
ROW_GROUP = 1 << 16


def request_table(rec: RequestRecorder, start: int = 0, stop: int | None = None,
                  lat: dict[str, np.ndarray] | None = None, more: dict | None = None) -> pa.Table:
    """Requests ``start:stop`` (default all), one row each; times in seconds of virtual time
    (see docs/outputs.md).  ``lat``: :func:`request_latencies` of ``rec``, when the caller
    builds several slices.  ``more``: further columns over all requests (arrays, or lists of
    strings), e.g. an agentic run's play and dependency ids."""
    stop = rec.size if stop is None else min(stop, rec.size)
    rows = slice(start, stop)

    def c(name: str) -> np.ndarray:
        return rec.column(name)[rows]

    if lat is None:
        lat = request_latencies(rec)
    cols = {
        "request_id": string_array(rec.request_id[rows]),
        "session_id": string_array(rec.session_id[rows]),
        "turn": c("turn"),
        "worker": c("worker"),
        "warmup": np.asarray(rec.warmup[rows], dtype=bool),
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
        "ttft_s": lat["ttft"][rows],
        "ttst_s": lat["ttst"][rows],
        "tpot_s": lat["tpot"][rows],
        "mean_itl_s": lat["mean_itl"][rows],
        "e2e_s": lat["e2e"][rows],
        "queue_s": lat["queue"][rows],
        "retractions": c("retractions"),
        "status": string_array([STATUS_NAMES[int(s)] for s in c("status")]),
        "reason": string_array(rec.reason[rows]),
    }
    for name, col in rec.extra_columns.items():
        cols[name] = col.data[: rec.size][rows]
    for name, values in (more or {}).items():
        cols[name] = string_array(values[rows]) if isinstance(values, list) else values[rows]
    return table(cols)


def write_requests(rec: RequestRecorder, path: Path, row_group: int = ROW_GROUP, more: dict | None = None) -> None:
    """requests.parquet, written ``row_group`` requests at a time.

    The file appears under its name only once complete: a failure half way (the writer
    would still close the file with a valid footer) leaves no short file behind.
    """
    lat = request_latencies(rec)
    part = path.with_name(path.name + ".part")
    try:
        first = request_table(rec, 0, row_group, lat, more)
        with pq.ParquetWriter(part, first.schema, compression="zstd", write_statistics=True) as writer:
            writer.write_table(first)
            del first
            for start in range(row_group, rec.size, row_group):
                writer.write_table(request_table(rec, start, start + row_group, lat, more))
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)


def write_parquet(data: pa.Table, path: Path) -> None:
    # No statistics timestamps or writer metadata that vary run to run: files are byte-identical.
    pq.write_table(data, path, compression="zstd", write_statistics=True)


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
