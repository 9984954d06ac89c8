"""Is the deployment overloaded?  Whether requests waiting for service pile up without bound.

A run's percentiles mean something only in a steady state.  When requests arrive faster
than the deployment serves them, the number of requests still waiting for their first token
grows in proportion to time, and every latency then depends on how long the run lasted.

The test (open-loop workloads): count the requests *pending* (arrived, neither a first token
nor a rejection yet) at evenly spaced instants of the second half of the arrival window
(from the middle to the last measured arrival), fit a least-squares line, and call the run
overloaded when the line's rise over that half exceeds both ``MIN_GROWTH`` requests and
``GROWTH_SHARE`` of the requests that arrived in it; i.e. when at least ~10% of the late
arrivals were not served as fast as they came.  A stable queue, however busy, fluctuates
around a level that does not depend on time, so its fitted rise stays near zero once the
first half has filled it; the first half is left out so that this fill-up is not read as
growth.  Requests that never get served (the time limit cut them) stay pending, which is
what an unbounded queue looks like.

Closed-loop workloads cannot overload in this sense (the client never has more than
``concurrency`` requests out), so the test reports ``applicable: false`` for them.

A queue can also be bounded and still be most of the latency: multi-turn sessions send a turn
only after the previous answer, so a deployment short of capacity slows the sessions down
instead of letting the queue grow, and a closed loop's client keeps its requests queued.
:func:`saturation_check` says so: a run is *saturated* when the median measured request
waited at least ``SATURATION_WAIT_S`` between its arrival and its first scheduling and that
wait is at least ``SATURATION_SHARE`` of its time to first token: its latencies are then
queueing, set by the load, more than service.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from servesim.metrics.recorder import RequestRecorder

#: Fitted rise of the pending count over the second half, as a share of that half's arrivals.
GROWTH_SHARE = 0.10
#: ... and at least this many requests (a handful of requests is noise, not a trend).
MIN_GROWTH = 10.0
#: Instants at which the pending count is sampled over the second half.
SAMPLES = 64
#: Saturated: the median wait for a first scheduling is at least this long (seconds) ...
SATURATION_WAIT_S = 1.0
#: ... and at least this share of the median time to first token.
SATURATION_SHARE = 0.5


def pending_counts(arrival: np.ndarray, served: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Requests with ``arrival <= t < served`` at each ``t`` (served may be +inf: never)."""
    a = np.sort(arrival)
    s = np.sort(served)
    return (np.searchsorted(a, times, side="right") - np.searchsorted(s, times, side="right")).astype(float)


def overload_check(rec: RequestRecorder, closed_loop: bool = False) -> dict[str, Any]:
    """The ``overload`` block of the summary (see the module docstring for the test)."""
    out: dict[str, Any] = {"overloaded": False, "applicable": not closed_loop}
    if closed_loop:
        out["note"] = "closed loop: the client keeps at most `concurrency` requests out"
        return out
    arrival_all = rec.column("arrival")
    measured = ~rec.is_warmup & ~np.isnan(arrival_all)  # a time limit leaves later arrivals unset
    arrival = arrival_all[measured]
    if arrival.size < 2 * MIN_GROWTH:  # also: no arrival at all
        out.update(applicable=False, note=f"fewer than {int(2 * MIN_GROWTH)} measured requests")
        return out
    first = rec.column("first_token")[measured]
    finish = rec.column("finish")[measured]
    served = np.where(np.isnan(first), finish, first)  # a rejection also ends the wait
    served = np.where(np.isnan(served), np.inf, served)  # never served: still pending at the end
    t0, t1 = float(arrival.min()), float(arrival.max())
    mid = (t0 + t1) / 2.0
    if t1 <= t0:
        out.update(applicable=False, note="every request arrived at once")
        return out
    times = np.linspace(mid, t1, SAMPLES)
    pending = pending_counts(arrival, served, times)
    dt = times - times.mean()
    slope = float((dt * (pending - pending.mean())).sum() / (dt * dt).sum())  # least-squares line
    late = int(((arrival > mid) & (arrival <= t1)).sum())
    growth = slope * (t1 - mid)
    threshold = max(MIN_GROWTH, GROWTH_SHARE * late)
    served_late = int(((served > mid) & (served <= t1)).sum())
    out.update(
        overloaded=bool(growth > threshold),
        pending_at_mid=int(pending[0]),
        pending_at_last_arrival=int(pending[-1]),
        pending_growth=growth,
        pending_growth_per_s=slope,
        growth_threshold=threshold,
        arrivals_second_half=late,
        served_second_half=served_late,
        window_s=[t0, t1],
    )
    return out


def saturation_check(rec: RequestRecorder) -> dict[str, Any]:
    """The saturation fields of the ``overload`` block (see the module docstring)."""
    measured = ~rec.is_warmup
    arrival = rec.column("arrival")[measured]
    scheduled = rec.column("first_scheduled")[measured]
    first = rec.column("first_token")[measured]
    ok = ~np.isnan(arrival) & ~np.isnan(scheduled) & ~np.isnan(first)
    if int(ok.sum()) < 2 * MIN_GROWTH:
        return {"saturated": False}
    wait = float(np.median(scheduled[ok] - arrival[ok]))
    ttft = float(np.median(first[ok] - arrival[ok]))
    share = wait / ttft if ttft > 0 else 0.0
    return {"saturated": bool(wait >= SATURATION_WAIT_S and share >= SATURATION_SHARE),
            "median_queue_wait_s": wait, "median_ttft_s": ttft, "queue_share_of_ttft": share}


def overload_message(block: dict[str, Any]) -> str | None:
    """One plain sentence for the console when the run is overloaded, else None."""
    if not block.get("overloaded"):
        return None
    return (f"OVERLOADED: requests waiting for a first token grew by {block['pending_growth']:.0f} "
            f"over the second half of the arrivals ({block['pending_growth_per_s']:.2f}/s; "
            f"{block['pending_at_mid']} -> {block['pending_at_last_arrival']} pending). Arrivals outpace "
            "what the deployment serves: latencies here depend on the run's length, not a steady state. "
            "Add workers (deployment.workers) or lower the load (arrival rate / workload.speedup).")


def saturation_message(block: dict[str, Any]) -> str | None:
    """One plain sentence for a saturated run that is not overloaded (that message says more)."""
    if block.get("overloaded") or not block.get("saturated"):
        return None
    return (f"SATURATED: the median request waited {block['median_queue_wait_s']:,.1f} s for its first "
            f"scheduling, {block['queue_share_of_ttft'] * 100:.0f}% of its time to first token: latencies here "
            "are queueing, set by the load, more than service. Add workers (deployment.workers) or lower the "
            "load (arrival rate, concurrency or workload.speedup).")
