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

from collections import Counter

import numpy as np

from servesim.metrics.recorder import RequestRecorder, Status
from servesim.metrics.stats import describe


def measured_span(rec: RequestRecorder, measured: np.ndarray, done: np.ndarray) -> float:
    """Seconds from the first measured arrival to the last completed measured finish (0 when
    none completed): the duration every throughput divides by, in ``predict`` and ``validate``."""
    finish = rec.column("finish")[done]
    if not finish.size:
        return 0.0
    return float(np.nanmax(finish)) - float(np.nanmin(rec.column("arrival")[measured]))


def request_latencies(rec: RequestRecorder) -> dict[str, np.ndarray]:
    """Per-request derived latencies (seconds, NaN where undefined), over all requests."""
    c = rec.column
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


def worker_breakdown(rec: RequestRecorder, workers, sim_end: float) -> list[dict]:
    """Per worker: requests, busy time and utilisation, passes, tokens and prefix-cache reuse.

    Utilisation is the share of the run's virtual time the worker spent in passes.
    """
    assigned = rec.column("worker")
    scheduled = ~np.isnan(rec.column("first_scheduled"))
    inp = rec.column("input_length")
    cached = rec.column("cached_tokens")
    out = []
    for w in workers:
        mine = assigned == w.worker_id
        sched = mine & scheduled
        prompt = int(inp[sched].sum())
        out.append({
            "worker": w.worker_id,
            "gpus": w.gpus,
            "requests": int(mine.sum()),
            "busy_s": w.busy_time,
            "utilization": w.busy_time / sim_end if sim_end > 0 else 0.0,
            "passes": w.passes,
            "tokens": w.tokens,
            "prefix_reuse_ratio": int(cached[sched].sum()) / prompt if prompt else None,  # undefined: no prompt ran
        })
    return out


def fleet_summary(workers, sim_end: float) -> dict:
    """GPUs of every worker and the GPU-hours the run's virtual time costs them."""
    gpus = sum(w.gpus for w in workers)
    return {"workers": len(workers), "gpus": gpus, "gpu_hours": gpus * sim_end / 3600.0,
            "mean_utilization": (sum(w.busy_time for w in workers) / (len(workers) * sim_end)
                                 if workers and sim_end > 0 else 0.0)}


def summarize(rec: RequestRecorder, total_gpus: int) -> dict:
    """The summary dict shown on the console and written to prediction.json."""
    status = rec.column("status")
    warm = rec.is_warmup
    measured = ~warm
    done = (status == Status.COMPLETED) & measured
    lat = request_latencies(rec)
    ms = 1000.0

    def stat(name: str) -> dict:
        v = lat[name][done]
        return describe(v[~np.isnan(v)], scale=ms)

    itl_v, itl_w = rec.itl.arrays()
    latency = {
        "ttft_ms": stat("ttft"),
        "ttst_ms": stat("ttst"),
        "itl_ms": describe(itl_v, itl_w, scale=ms),
        "tpot_ms": stat("tpot"),
        "e2e_ms": stat("e2e"),
        "queue_ms": stat("queue"),
    }
    span = measured_span(rec, measured, done)
    inp = int(rec.column("input_length")[done].sum())
    out = int(rec.column("generated")[done].sum())
    n_done = int(done.sum())

    def rate(x: float) -> float | None:
        return x / span if span > 0 else None

    def per_gpu(x: float | None) -> float | None:
        return x / total_gpus if x is not None else None

    throughput = {
        "duration_s": span,
        "request_per_s": rate(n_done),
        "input_tokens_per_s": rate(inp),
        "output_tokens_per_s": rate(out),
        "total_tokens_per_s": rate(inp + out),
    }
    for key in ("request_per_s", "input_tokens_per_s", "output_tokens_per_s", "total_tokens_per_s"):
        throughput[key + "_per_gpu"] = per_gpu(throughput[key])
    scheduled = measured & ~np.isnan(rec.column("first_scheduled"))
    prompt_tokens = int(rec.column("input_length")[scheduled].sum())
    cached = int(rec.column("cached_tokens")[scheduled].sum())
    host_cached = int(rec.column("host_cached_tokens")[scheduled].sum())
    retr = rec.column("retractions")[measured]
    reasons = Counter(rec.reason[i] for i in np.flatnonzero(status == Status.REJECTED))
    unfinished_reasons = Counter(rec.reason[i] for i in np.flatnonzero(status == Status.UNFINISHED))
    # completed, but with fewer tokens than asked (an output cut at the context length): counted
    cut = (status == Status.COMPLETED) & (rec.column("generated") < rec.column("output_length"))
    counts = {
        "total": int(rec.size),
        "warmup": int(warm.sum()),
        "completed": int((status == Status.COMPLETED).sum()),
        "completed_measured": n_done,
        "rejected": int((status == Status.REJECTED).sum()),
        "rejected_by_reason": dict(sorted(reasons.items())),
        "unfinished": int((status == Status.UNFINISHED).sum()),
        "unfinished_by_reason": dict(sorted(unfinished_reasons.items())),
        "output_cut_at_context": int(cut.sum()),
    }
    accounted = counts["completed"] + counts["rejected"] + counts["unfinished"]
    if accounted != counts["total"]:
        raise AssertionError(f"request accounting broken: {accounted} terminal of {counts['total']}")
    cache = {
        "prompt_tokens": prompt_tokens,
        "cached_tokens": cached,
        "host_cached_tokens": host_cached,
        "prefix_reuse_ratio": cached / prompt_tokens if prompt_tokens else None,  # undefined: no prompt ran
    }
    return {
        "requests": counts,
        "latency": latency,
        "throughput": throughput,
        "cache": cache,
        "retractions": {"total": int(retr.sum()), "requests_retracted": int((retr > 0).sum())},
        "total_gpus": total_gpus,
    }
