"""Output files: prediction.json, requests.parquet, timeseries.parquet, written as one set."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import tempfile
import threading
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
    (see docs/outputs.md).  ``lat``: :func:`request_latencies` of the same rows, when the
    caller has them.  ``more``: further columns over all requests (arrays, or lists of
    strings), e.g. an agentic run's play and dependency ids."""
    stop = rec.size if stop is None else min(stop, rec.size)
    rows = slice(start, stop)

    def c(name: str) -> np.ndarray:
        return rec.column(name, start, stop)

    if lat is None:
        lat = request_latencies(rec, start, stop)
    status = c("status")
    names = np.array([STATUS_NAMES.get(i, "") for i in range(max(STATUS_NAMES) + 1)], dtype=object)
    cols = {
        "request_id": rec.request_id.arrow(start, stop),
        "session_id": rec.session_id.arrow(start, stop),
        "turn": c("turn"),
        "worker": c("worker"),
        "warmup": np.asarray(rec.is_warmup[rows], dtype=bool),
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
        "status": string_array(names[status].tolist()),
        "reason": rec.reason.arrow(start, stop),
    }
    for name, col in rec.extra_columns.items():
        cols[name] = col.data[: rec.size][rows]
    for name, values in (more or {}).items():
        cols[name] = string_array(values[rows]) if isinstance(values, list) else values[rows]
    return table(cols)


def write_requests(rec: RequestRecorder, path: Path, row_group: int = ROW_GROUP, more: dict | None = None) -> None:
    """requests.parquet, written ``row_group`` requests at a time (a slice's latencies are
    computed with it, and a spilled recorder's pages dropped after it: memory stays bounded
    by a row group, not by the run).  ``more``: as for :func:`request_table`.

    The file appears under its name only once complete: a failure half way (the writer
    would still close the file with a valid footer) leaves no short file behind.
    """
    part = path.with_name(path.name + ".part")
    try:
        first = request_table(rec, 0, row_group, more=more)
        with pq.ParquetWriter(part, first.schema, compression="zstd", write_statistics=True) as writer:
            writer.write_table(first)
            del first
            for start in range(row_group, rec.size, row_group):
                writer.write_table(request_table(rec, start, start + row_group, more=more))
                rec.release(start + row_group)
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


# ---------------------------------------------------------------------------------------
# The output set: every file of a run appears at once, or none does.
# ---------------------------------------------------------------------------------------

#: Names a run writes into its folder (figures with --plot).  A folder holding only these
#: (or nothing) is replaced whole; see :class:`OutputSet`.
OUTPUT_FILES = ("prediction.json", "requests.parquet", "timeseries.parquet", "kv_events.jsonl",
                "latency.png", "timeline.png")
_TMP_TAG = ".servesim-tmp-"
_OLD_TAG = ".servesim-old-"


class OutputSet:
    """A run's output folder, written in a temporary folder beside it and moved into place
    only when every file is complete (:meth:`commit`).

    Until the commit the target keeps the previous run's files, untouched; an exception,
    Ctrl-C or SIGKILL before it leaves them so (the temporary folder is removed on the way
    out, or, after SIGKILL, by the next run into the same target).  The commit exchanges the
    two folders in one ``renameat2(RENAME_EXCHANGE)`` call where Linux offers it, else with two
    renames a few microseconds apart.  A target that holds files of its own (anything but
    :data:`OUTPUT_FILES`) is never replaced: the new files are moved in one by one, the
    previous ``prediction.json`` removed first and the new one moved last, so that at no
    moment does the folder hold a ``prediction.json`` of one run beside files of another.
    """

    def __init__(self, target: str | Path) -> None:
        self.target = Path(target)
        self.tmp: Path | None = None
        self.committed = False

    def __enter__(self) -> "OutputSet":
        parent = self.target.absolute().parent
        parent.mkdir(parents=True, exist_ok=True)
        _remove_leftovers(parent, self.target.name)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.target.name}{_TMP_TAG}{os.getpid()}-", dir=parent))
        mask = os.umask(0)
        os.umask(mask)
        self.tmp.chmod(0o777 & ~mask)  # as a plain mkdir would (mkdtemp makes it private)
        return self

    @property
    def path(self) -> Path:
        """The temporary folder to write into."""
        assert self.tmp is not None, "use OutputSet in a with block"
        return self.tmp

    def commit(self) -> Path:
        """Put the complete set in place of the target; returns the target.  Ctrl-C during
        the commit takes effect once it is done (the swap and its clean-up are not split)."""
        with _sigint_deferred():
            self._commit()
        return self.target

    def _commit(self) -> None:
        tmp, target = self.path, self.target
        if target.exists() and not target.is_dir():
            raise OSError(f"{target} is a file, expected a folder for the output files")
        if not target.exists():
            os.rename(tmp, target)
        elif _only_outputs(target):
            old = target.with_name(f".{target.name}{_OLD_TAG}{os.getpid()}")
            if _exchange(tmp, target):
                os.rename(tmp, old)  # tmp now holds the previous files
            else:
                os.rename(target, old)
                os.rename(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            self._merge_into(target)
        self.committed = True

    def _merge_into(self, target: Path) -> None:
        tmp = self.path
        (target / "prediction.json").unlink(missing_ok=True)
        new = sorted(p.name for p in tmp.iterdir())
        for name in OUTPUT_FILES:  # stale files of an earlier run that this one does not write
            if name not in new:
                (target / name).unlink(missing_ok=True)
        for name in sorted(new, key=lambda n: n == "prediction.json"):
            os.replace(tmp / name, target / name)
        tmp.rmdir()

    def __exit__(self, *exc) -> None:
        if self.tmp is not None and self.tmp.exists():
            shutil.rmtree(self.tmp, ignore_errors=True)


@contextlib.contextmanager
def _sigint_deferred():
    """Hold a SIGINT that arrives inside the block and raise it (KeyboardInterrupt) after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def _only_outputs(folder: Path) -> bool:
    """Whether ``folder`` holds nothing but servesim output files (so it may be replaced)."""
    return all(p.name in OUTPUT_FILES and p.is_file() for p in folder.iterdir())


def _remove_leftovers(parent: Path, name: str) -> None:
    """Temporary folders of earlier runs into ``name`` whose process is gone (killed)."""
    for p in parent.glob(f".{name}.servesim-*"):
        tag = _TMP_TAG if _TMP_TAG in p.name else _OLD_TAG
        pid = p.name.split(tag, 1)[-1].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2``); False where unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return rc == 0
