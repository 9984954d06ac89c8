"""The run summary: latency statistics, throughput, cache reuse and request accounting.

Definitions (also in docs/outputs.md):

* TTFT = first token time - arrival; TTST (time to second token) = second token - arrival.
* TPOT of a request = (last token - first token) / (generated tokens - 1), for requests
  with at least two tokens; ITL = every gap between consecutive token emissions.
* End-to-end latency = finish - arrival; queue time = first scheduled - arrival.
* Latencies are over completed, non-warm-up requests, except ITL, which pools every gap of
  every non-warm-up request, including the gaps a request cut by the time limit saw before
  the cut (a server-side view).  Throughputs divide completed requests' tokens by the measured
  span: first measured arrival to last measured finish.  Retractions count measured requests.
"""

from __future__ import annotations

import math

import numpy as np

from servesim.metrics.recorder import RequestRecorder, Status
from servesim.metrics.stats import SKETCH_ALPHA, Accumulator


def measured_span(rec: RequestRecorder, measured: np.ndarray, done: np.ndarray) -> float:
    """Seconds from the first measured arrival to the last completed measured finish (0 when
    none completed): the duration every throughput divides by, in ``predict`` and ``validate``."""
    finish = rec.column("finish")[done]
    if not finish.size:
        return 0.0
    return float(np.nanmax(finish)) - float(np.nanmin(rec.column("arrival")[measured]))


def request_latencies(rec: RequestRecorder, start: int = 0, stop: int | None = None) -> dict[str, np.ndarray]:
    """Per-request derived latencies (seconds, NaN where undefined) of requests ``start:stop``
    (default all)."""
    def c(name: str) -> np.ndarray:
        return rec.column(name, start, stop)

    arrival = c("arrival")
    first = c("first_token")
    last = c("last_token")
    gen = c("generated")
    em = c("emissions")
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(gen > 1, (last - first) / (gen - 1), np.nan)
        mean_itl = np.where(em > 1, (last - first) / (em - 1), np.nan)
    return {
        "ttft": first - arrival,
        "ttst": c("second_token") - arrival,
        "tpot": tpot,
        "mean_itl": mean_itl,
        "e2e": c("finish") - arrival,
        "queue": c("first_scheduled") - arrival,
    }


#: Requests per step of the summary's pass over the columns: bounds its temporary arrays
#: (about 20 float columns of a chunk, ~160 MB at this size) whatever the run's size.
SUMMARY_CHUNK = 1 << 20


def chunks(rec: RequestRecorder, size: int = SUMMARY_CHUNK):
    """``(start, stop)`` of consecutive slices of the requests; the column pages of each
    slice are dropped from memory after it (spilled recorders, metrics/columns.py)."""
    for start in range(0, rec.size, size):
        stop = min(start + size, rec.size)
        yield start, stop
        rec.release(stop)


def worker_breakdown(rec: RequestRecorder, workers, sim_end: float) -> list[dict]:
    """Per worker: requests, busy time and utilisation, passes, tokens and prefix-cache reuse.

    Utilisation is the share of the run's virtual time the worker spent in passes.
    """
    ids = [w.worker_id for w in workers]
    n_ids = max(ids, default=-1) + 2  # worker -1 (never assigned) counted in the last slot
    requests = np.zeros(n_ids, dtype=np.int64)
    prompt = np.zeros(n_ids, dtype=np.int64)
    cached = np.zeros(n_ids, dtype=np.int64)
    for a, b in chunks(rec):
        assigned = rec.column("worker", a, b)
        slot = np.where(assigned >= 0, assigned, n_ids - 1)
        sched = ~np.isnan(rec.column("first_scheduled", a, b))
        requests += np.bincount(slot, minlength=n_ids)
        prompt += np.bincount(slot[sched], weights=rec.column("input_length", a, b)[sched],
                              minlength=n_ids).astype(np.int64)
        cached += np.bincount(slot[sched], weights=rec.column("cached_tokens", a, b)[sched],
                              minlength=n_ids).astype(np.int64)
    out = []
    for w in workers:
        i = w.worker_id
        out.append({
            "worker": i,
            "gpus": w.gpus,
            "requests": int(requests[i]),
            "busy_s": w.busy_time,
            "utilization": w.busy_time / sim_end if sim_end > 0 else 0.0,
            "passes": w.passes,
            "tokens": w.tokens,
            "prefix_reuse_ratio": int(cached[i]) / int(prompt[i]) if prompt[i] else None,  # undefined: no prompt ran
        })
    return out


def fleet_summary(workers, sim_end: float) -> dict:
    """GPUs of every worker and the GPU-hours the run's virtual time costs them."""
    gpus = sum(w.gpus for w in workers)
    return {"workers": len(workers), "gpus": gpus, "gpu_hours": gpus * sim_end / 3600.0,
            "mean_utilization": (sum(w.busy_time for w in workers) / (len(workers) * sim_end)
                                 if workers and sim_end > 0 else 0.0)}


def summarize(rec: RequestRecorder, total_gpus: int) -> dict:
    """The summary dict shown on the console and written to prediction.json.

    One pass over the columns in slices of :data:`SUMMARY_CHUNK` requests: counts and sums
    are exact; latency statistics are exact up to ``stats.EXACT_LIMIT`` completed requests
    and, beyond, come from a mergeable sketch whose percentiles are within
    ``stats.SKETCH_ALPHA`` (0.1%) of the exact ones (count, mean, min and max stay exact).
    """
    ms = 1000.0
    acc = {name: Accumulator() for name in ("ttft", "ttst", "tpot", "e2e", "queue")}
    n = {"warmup": 0, "completed": 0, "done": 0, "rejected": 0, "unfinished": 0, "cancelled": 0, "cut": 0}
    tokens = {"input": 0, "output": 0, "prompt": 0, "cached": 0, "host_cached": 0,
              "retractions": 0, "retracted": 0}
    first_arrival, last_finish = math.inf, -math.inf
    rejected_rows: list[np.ndarray] = []
    unfinished_rows: list[np.ndarray] = []
    for a, b in chunks(rec):
        status = rec.column("status", a, b)
        measured = ~rec.is_warmup[a:b]
        completed = status == Status.COMPLETED
        done = completed & measured
        lat = request_latencies(rec, a, b)
        for name, values in acc.items():
            values.add(lat[name][done])
        del lat
        gen = rec.column("generated", a, b)
        inp = rec.column("input_length", a, b)
        n["warmup"] += int((~measured).sum())
        n["completed"] += int(completed.sum())
        n["done"] += int(done.sum())
        n["cut"] += int((completed & (gen < rec.column("output_length", a, b))).sum())
        rejected = status == Status.REJECTED
        unfinished = status == Status.UNFINISHED
        n["rejected"] += int(rejected.sum())
        n["unfinished"] += int(unfinished.sum())
        n["cancelled"] += int((status == Status.CANCELLED).sum())
        rejected_rows.append(a + np.flatnonzero(rejected))
        unfinished_rows.append(a + np.flatnonzero(unfinished))
        tokens["input"] += int(inp[done].sum())
        tokens["output"] += int(gen[done].sum())
        scheduled = measured & ~np.isnan(rec.column("first_scheduled", a, b))
        tokens["prompt"] += int(inp[scheduled].sum())
        tokens["cached"] += int(rec.column("cached_tokens", a, b)[scheduled].sum())
        tokens["host_cached"] += int(rec.column("host_cached_tokens", a, b)[scheduled].sum())
        retr = rec.column("retractions", a, b)[measured]
        tokens["retractions"] += int(retr.sum())
        tokens["retracted"] += int((retr > 0).sum())
        arrivals = rec.column("arrival", a, b)[measured]
        if arrivals.size and not np.isnan(arrivals).all():
            first_arrival = min(first_arrival, float(np.nanmin(arrivals)))
        finish = rec.column("finish", a, b)[done]
        if finish.size:
            last_finish = max(last_finish, float(np.nanmax(finish)))
    latency = {
        "ttft_ms": acc["ttft"].describe(ms),
        "ttst_ms": acc["ttst"].describe(ms),
        "itl_ms": rec.itl.describe(scale=ms),
        "tpot_ms": acc["tpot"].describe(ms),
        "e2e_ms": acc["e2e"].describe(ms),
        "queue_ms": acc["queue"].describe(ms),
    }
    span = last_finish - first_arrival if n["done"] else 0.0
    n_done = n["done"]

    def rate(x: float) -> float | None:
        return x / span if span > 0 else None

    def per_gpu(x: float | None) -> float | None:
        return x / total_gpus if x is not None else None

    inp, out = tokens["input"], tokens["output"]
    throughput = {
        "duration_s": span,
        "request_per_s": rate(n_done),
        "input_tokens_per_s": rate(inp),
        "output_tokens_per_s": rate(out),
        "total_tokens_per_s": rate(inp + out),
    }
    for key in ("request_per_s", "input_tokens_per_s", "output_tokens_per_s", "total_tokens_per_s"):
        throughput[key + "_per_gpu"] = per_gpu(throughput[key])
    counts = {
        "total": int(rec.size),
        "warmup": n["warmup"],
        "completed": n["completed"],
        "completed_measured": n_done,
        "rejected": n["rejected"],
        "rejected_by_reason": dict(sorted(rec.reason.counts(np.concatenate(rejected_rows)).items()))
        if rejected_rows else {},
        "unfinished": n["unfinished"],
        "unfinished_by_reason": dict(sorted(rec.reason.counts(np.concatenate(unfinished_rows)).items()))
        if unfinished_rows else {},
        # aborted by their client (servesim serve: a disconnect) before they ended
        "cancelled": n["cancelled"],
        # completed, but with fewer tokens than asked (an output cut at the context length): counted
        "output_cut_at_context": n["cut"],
    }
    accounted = counts["completed"] + counts["rejected"] + counts["unfinished"] + counts["cancelled"]
    if accounted != counts["total"]:
        raise AssertionError(f"request accounting broken: {accounted} terminal of {counts['total']}")
    prompt_tokens = tokens["prompt"]
    cache = {
        "prompt_tokens": prompt_tokens,
        "cached_tokens": tokens["cached"],
        "host_cached_tokens": tokens["host_cached"],
        "prefix_reuse_ratio": tokens["cached"] / prompt_tokens if prompt_tokens else None,  # undefined: no prompt ran
    }
    exact = all(a.exact for a in acc.values()) and rec.itl.sketch is None
    return {
        "requests": counts,
        "latency": latency,
        "throughput": throughput,
        "cache": cache,
        "retractions": {"total": tokens["retractions"], "requests_retracted": tokens["retracted"]},
        "total_gpus": total_gpus,
        "statistics": {"exact": exact, "sketch_relative_error": None if exact else SKETCH_ALPHA},
    }
