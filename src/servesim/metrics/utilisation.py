"""How loaded each worker was, beyond "busy": batch occupancy, KV occupancy and queue length.

A worker's busy share (time in passes / run time) reads ~100% on any worker that always has a
request to run, whether it runs one request a pass or its full batch, so it cannot show
headroom.  The figures here say how *full* the worker was:

* ``mean_running``: time-average of requests in the running batch;
* ``batch_occupancy``: ``mean_running`` / the engine's seats (SGLang ``max_running_requests``,
  vLLM ``max_num_seqs``, TensorRT-LLM ``max_batch_size``; summed over attention-DP ranks);
* ``kv_usage_mean`` / ``kv_usage_max``: time-average and peak of KV tokens held by requests
  (evictable cache excluded) as a share of capacity;
* ``mean_waiting`` / ``max_waiting``: time-average and peak of the waiting queue.

They are read from the time series (``timeseries.parquet``'s rows): a sample holds until the
worker's next one (the last until the end of the run), a worker counts as idle before its
first.  Without a time series (``output.timeseries: false``) they are ``None``.

Disaggregated runs also get a role per worker (prefill or decode), each decode worker's
requests counted from ``decode_worker``, and :func:`role_summary` with each pool's figures and
the handoff's stages (prefill, KV transfer, wait for decode admission).  A prefill worker's
running and KV figures come from its requests' prefill intervals (:func:`prefill_load`).
"""

from __future__ import annotations

import numpy as np

from servesim.metrics.recorder import RequestRecorder
from servesim.metrics.stats import describe, weighted_sum


def engine_seats(engine) -> int | None:
    """Most requests the engine runs in one batch (summed over attention-DP ranks)."""
    ranks = getattr(engine, "ranks", None)
    if ranks:
        seats = [engine_seats(r) for r in ranks]
        return sum(seats) if all(s is not None for s in seats) else None
    inner = getattr(engine, "inner", None)  # a disaggregated prefill worker's wrapper
    for name in ("max_running", "max_seqs", "max_batch"):
        value = getattr(engine, name, None)
        if value is None and inner is not None:
            value = getattr(inner, name, None)
        if value is not None:
            return int(value)
    return None


def time_weighted(times: np.ndarray, values: np.ndarray, end: float) -> float:
    """Mean over ``[0, end]`` of a step function: ``values[i]`` from ``times[i]`` until the next
    sample (the last until ``end``), 0 before the first sample.  ``times`` need not be sorted."""
    if end <= 0 or times.size == 0:
        return 0.0
    order = np.argsort(times, kind="stable")
    return _held_mean(times[order], values[order], end)


def _held_mean(t: np.ndarray, values: np.ndarray, end: float) -> float:
    """:func:`time_weighted` of samples already in time order."""
    t = np.minimum(t, end)
    held = np.diff(np.append(t, end))
    # not np.dot: BLAS threads would make the last bits depend on the machine (stats.weighted_sum)
    return weighted_sum(values.astype(float), held) / end


def _by_worker(columns: dict[str, np.ndarray]) -> dict[int, slice]:
    """Rows of each worker after sorting ``columns`` by (worker, time) in place of the dict's arrays."""
    order = np.lexsort((columns["time_s"], columns["worker"]))
    for key in ("time_s", "worker", "running", "waiting", "kv_usage"):
        columns[key] = columns[key][order]
    workers, starts = np.unique(columns["worker"], return_index=True)
    ends = list(starts[1:]) + [columns["worker"].size]
    return {int(w): slice(int(a), int(b)) for w, a, b in zip(workers, starts, ends)}


def worker_load(columns: dict[str, np.ndarray] | None, workers, sim_end: float) -> dict[int, dict]:
    """Per worker id: the load figures of the module docstring (``None`` without a time series)."""
    out: dict[int, dict] = {}
    rows: dict[int, slice] = {}
    cols = None
    if columns is not None:
        cols = dict(columns)
        rows = _by_worker(cols)
    for w in workers:
        seats = engine_seats(w.engine)
        figures: dict = {"seats": seats, "mean_running": None, "batch_occupancy": None, "mean_waiting": None,
                         "max_waiting": None, "kv_usage_mean": None, "kv_usage_max": None}
        if cols is not None:
            mine = rows.get(w.worker_id, slice(0, 0))
            t = cols["time_s"][mine].astype(float)
            running = _held_mean(t, cols["running"][mine], sim_end) if t.size and sim_end > 0 else 0.0
            waiting = cols["waiting"][mine]
            kv = cols["kv_usage"][mine].astype(float)
            figures.update(
                mean_running=running,
                batch_occupancy=running / seats if seats else None,
                mean_waiting=_held_mean(t, waiting, sim_end) if t.size and sim_end > 0 else 0.0,
                max_waiting=int(waiting.max()) if waiting.size else 0,
                kv_usage_mean=_held_mean(t, kv, sim_end) if t.size and sim_end > 0 else 0.0,
                kv_usage_max=float(kv.max()) if kv.size else 0.0,
            )
        out[w.worker_id] = figures
    return out


def add_load(breakdown: list[dict], load: dict[int, dict]) -> None:
    """Merge :func:`worker_load` into ``summary["workers"]`` rows (in place)."""
    for row in breakdown:
        row.update(load.get(row["worker"], {}))


def fleet_load(breakdown: list[dict]) -> dict:
    """Fleet-wide load: batch and KV occupancy averaged over workers, queue summed over them."""
    def mean(key: str) -> float | None:
        vals = [r[key] for r in breakdown if r.get(key) is not None]
        return float(np.mean(vals)) if vals else None

    waiting = [r["mean_waiting"] for r in breakdown if r.get("mean_waiting") is not None]
    return {"mean_batch_occupancy": mean("batch_occupancy"), "mean_kv_usage": mean("kv_usage_mean"),
            "mean_waiting": float(sum(waiting)) if waiting else None}


def assign_roles(breakdown: list[dict], rec: RequestRecorder, n_prefill: int) -> None:
    """Disaggregated runs: a ``role`` per worker row, and each decode worker's ``requests``
    counted from the ``decode_worker`` column (``worker`` holds the prefill worker)."""
    decode_of = rec.column("decode_worker") if "decode_worker" in rec.extra_columns else None
    for row in breakdown:
        if row["worker"] < n_prefill:
            row["role"] = "prefill"
        else:
            row["role"] = "decode"
            if decode_of is not None:
                row["requests"] = int((decode_of == row["worker"]).sum())


def _stage_ms(rec: RequestRecorder, start: str, end: str, keep: np.ndarray) -> dict:
    a, b = rec.column(start)[keep], rec.column(end)[keep]
    v = b - a
    return describe(v[~np.isnan(v)], scale=1000.0)


def role_summary(breakdown: list[dict], rec: RequestRecorder) -> dict:
    """Per pool (prefill, decode): workers, GPUs, requests, busy share and load; and the handoff's
    stages over measured requests that reached them (ms): ``prefill_ms`` (prefill start → end),
    ``transfer_wait_ms`` (prefill end → transfer start, the link busy), ``transfer_ms``
    (transfer start → end), ``decode_wait_ms`` (transfer end → first decode step)."""
    roles: dict = {}
    for role in ("prefill", "decode"):
        rows = [r for r in breakdown if r.get("role") == role]
        if not rows:
            continue
        figures = fleet_load(rows)
        roles[role] = {
            "workers": len(rows), "gpus": sum(r["gpus"] for r in rows),
            "requests": sum(r["requests"] for r in rows),
            "mean_utilization": float(np.mean([r["utilization"] for r in rows])),
            **figures,
        }
    if roles and "prefill_start_s" in rec.extra_columns:
        keep = ~rec.is_warmup
        roles["stages"] = {
            "prefill_ms": _stage_ms(rec, "prefill_start_s", "prefill_end_s", keep),
            "transfer_wait_ms": _stage_ms(rec, "prefill_end_s", "transfer_start_s", keep),
            "transfer_ms": _stage_ms(rec, "transfer_start_s", "transfer_end_s", keep),
            "decode_wait_ms": _stage_ms(rec, "transfer_end_s", "decode_start_s", keep),
        }
    return roles


def annotate_workers(summary: dict, rec: RequestRecorder, columns: dict[str, np.ndarray] | None, workers,
                     sim_end: float, n_prefill: int | None = None) -> None:
    """Add the load figures to ``summary["workers"]`` and ``summary["fleet"]``, and in a
    disaggregated run (``n_prefill``: prefill workers, ids ``0 .. n_prefill - 1``) the roles
    and ``summary["roles"]``."""
    breakdown = summary["workers"]
    add_load(breakdown, worker_load(columns, workers, sim_end))
    if n_prefill is not None and columns is not None:
        add_load(breakdown, prefill_load(rec, [w for w in workers if w.worker_id < n_prefill], sim_end))
    summary["fleet"].update(fleet_load(breakdown))
    if n_prefill is not None:
        assign_roles(breakdown, rec, n_prefill)
        summary["roles"] = role_summary(breakdown, rec)


def prefill_load(rec: RequestRecorder, workers, sim_end: float) -> dict[int, dict]:
    """A disaggregated prefill worker's running and KV figures, from its requests' prefill
    intervals instead of the time series.

    The series samples a worker at its pass ends, after the pass's finished requests have
    left; a prefill worker's requests all leave at the end of their prefill (their KV goes to
    the decode pool then), so its samples would read an empty batch however busy it is.  A
    request runs, and holds KV for its prompt, from ``prefill_start_s`` to ``prefill_end_s``
    (the run's end if it never finished): the time averages and the peak are those intervals'.
    """
    if "prefill_start_s" not in rec.extra_columns or sim_end <= 0:
        return {}
    worker = rec.column("worker")
    start = rec.column("prefill_start_s")
    end = np.where(np.isnan(rec.column("prefill_end_s")), sim_end, rec.column("prefill_end_s"))
    held = rec.column("input_length").astype(float)
    out: dict[int, dict] = {}
    for w in workers:
        mine = (worker == w.worker_id) & ~np.isnan(start)
        a, b, tokens = start[mine], np.minimum(end[mine], sim_end), held[mine]
        running = float((b - a).sum() / sim_end)
        seats = engine_seats(w.engine)
        capacity = w.engine.snapshot().kv_capacity_tokens
        figures = {"mean_running": running, "batch_occupancy": running / seats if seats else None}
        if capacity:
            figures["kv_usage_mean"] = float((tokens * (b - a)).sum() / (capacity * sim_end))
            figures["kv_usage_max"] = _peak_held(a, b, tokens) / capacity
        out[w.worker_id] = figures
    return out


def _peak_held(start: np.ndarray, end: np.ndarray, tokens: np.ndarray) -> float:
    """Largest sum of ``tokens`` over intervals ``[start, end)`` open at one instant (an interval
    ending at an instant is closed before one starting there opens)."""
    if start.size == 0:
        return 0.0
    times = np.concatenate([end, start])
    deltas = np.concatenate([-tokens, tokens])
    order = np.lexsort((deltas, times))  # at equal times the releases (negative) first
    return float(max(np.cumsum(deltas[order]).max(), 0.0))
