"""Per-worker time series, sampled at pass ends no more often than a set interval, and when a worker goes idle.

Without the idle rows a worker's last busy sample would stand for every idle stretch after
it (the throttle usually skips the pass end that empties it), and a plot carrying samples
forward would draw an idle worker as busy.

Compiled from this source (``timeseries.pxd``): the simulation offers it every pass end.
"""

from __future__ import annotations

import numpy as np

TIMESERIES_FIELDS = (
    "time_s", "worker", "running", "waiting", "kv_used_tokens", "kv_usage",
    "cache_hit_ratio", "tokens_per_pass", "passes",
)


class TimeSeries:
    """Rows of worker state; one row per worker per ``interval`` seconds at most."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.rows: dict[str, list] = {k: [] for k in TIMESERIES_FIELDS}
        self._last_t: dict[int, float] = {}
        self._last_passes: dict[int, int] = {}
        self._last_tokens: dict[int, int] = {}
        #: Workers whose latest row is an idle one (the next busy sample is not throttled).
        self._idle: set[int] = set()

    def sample(self, worker, now: float, idle: bool = False) -> None:
        """Record the worker's state at a pass end (throttled), or as it goes ``idle`` (once per idle stretch)."""
        wid = worker.worker_id
        if idle:
            if wid in self._idle:
                return
            self._idle.add(wid)
        elif wid in self._idle:
            self._idle.discard(wid)  # busy again: recorded at once
        else:
            last = self._last_t.get(wid)
            if last is not None and now - last < self.interval:
                return
        snap = worker.engine.snapshot()
        passes = worker.passes - self._last_passes.get(wid, 0)
        tokens = worker.tokens - self._last_tokens.get(wid, 0)
        self._last_t[wid] = now
        self._last_passes[wid] = worker.passes
        self._last_tokens[wid] = worker.tokens
        r = self.rows
        r["time_s"].append(now)
        r["worker"].append(wid)
        r["running"].append(snap.running)
        r["waiting"].append(snap.waiting)
        r["kv_used_tokens"].append(snap.kv_used_tokens)
        r["kv_usage"].append(snap.kv_used_tokens / snap.kv_capacity_tokens if snap.kv_capacity_tokens else 0.0)
        r["cache_hit_ratio"].append(
            snap.cached_prompt_tokens / snap.prompt_tokens if snap.prompt_tokens else 0.0)
        r["tokens_per_pass"].append(tokens / passes if passes else 0.0)
        r["passes"].append(passes)

    def passes_to_sample(self, wid: int, ends: np.ndarray) -> int:
        """Of a stretch's pass ends ``ends`` (increasing), how many run up to the first one that
        :meth:`sample` would record (all of them if none would).

        Pass-by-pass simulation offers every pass end to :meth:`sample`; a fast-mode stretch
        ends there instead, so the rows are taken at the same pass ends with the same state.
        """
        last = self._last_t.get(wid)
        if last is None or wid in self._idle:
            return 1
        # The ends increase, so their differences from ``last`` do (rounding is monotone): the
        # first and last decide most stretches without the array operations below.
        if not ends.size:
            return 0
        if ends[-1] - last < self.interval:
            return int(ends.size)  # none due
        if ends[0] - last >= self.interval:
            return 1
        due = _first_due(ends, last, self.interval)  # sample's test, element-wise
        return min(due + 1, ends.size)

    def columns(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in self.rows.items()}


def _first_due(ends: np.ndarray, last: float, interval: float) -> int:
    """``(ends - last).searchsorted(interval, side="left")`` without the array: the first ``i``
    with ``ends[i] - last >= interval``, by bisection (the differences increase with ``ends``).
    A stretch of thousands of passes asks this at each of its samples."""
    lo, hi = 0, len(ends)
    while lo < hi:
        mid = (lo + hi) // 2
        if ends[mid] - last < interval:
            lo = mid + 1
        else:
            hi = mid
    return lo
