"""A console summary in the style of a serving benchmark report."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

LATENCY_ROWS = (
    ("ttft_ms", "TTFT"),
    ("ttst_ms", "TTST"),
    ("itl_ms", "ITL"),
    ("tpot_ms", "TPOT"),
    ("e2e_ms", "E2E"),
    ("queue_ms", "Queue"),
)
STAT_COLS = ("mean", "std", "min", "p50", "p90", "p95", "p99", "max")


def _fmt(v, digits: int = 2) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.{digits}f}"


def _percent(ratio: float | None, sign: str = "%") -> str:
    """A ratio as a percentage with one decimal; "n/a" where it is undefined (None)."""
    return "n/a" if ratio is None else f"{ratio * 100:.1f}{sign}"


def render_summary(summary: dict, header: dict, console: Console, host: dict | None = None) -> None:
    """Print the summary tables."""
    title = " | ".join(f"{k}: {v}" for k, v in header.items())
    console.rule("[bold]servesim prediction")
    console.print(title)
    req = summary["requests"]
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_row("Requests (input)", _fmt(req["total"]))
    if req["warmup"]:
        t.add_row("  warm-up (excluded)", _fmt(req["warmup"]))
    t.add_row("Completed", _fmt(req["completed"]))
    t.add_row("Rejected", _fmt(req["rejected"]))
    for reason, n in req["rejected_by_reason"].items():
        t.add_row(f"  {reason}", _fmt(n))
    t.add_row("Unfinished", _fmt(req["unfinished"]))
    for reason, n in req["unfinished_by_reason"].items():
        t.add_row(f"  {reason}", _fmt(n))
    thr = summary["throughput"]
    t.add_row("Measured duration (s)", _fmt(thr["duration_s"]))
    for key, label in (("request_per_s", "Request throughput (req/s)"),
                       ("input_tokens_per_s", "Input token throughput (tok/s)"),
                       ("output_tokens_per_s", "Output token throughput (tok/s)"),
                       ("total_tokens_per_s", "Total token throughput (tok/s)")):
        t.add_row(label, f"{_fmt(thr[key])}   ({_fmt(thr[key + '_per_gpu'])} per GPU)")
    cache = summary["cache"]
    t.add_row("Prefix-cache reuse", f"{_percent(cache['prefix_reuse_ratio'])} "
              f"({_fmt(cache['cached_tokens'])} of {_fmt(cache['prompt_tokens'])} prompt tokens)")
    r = summary["retractions"]
    t.add_row("Retractions / preemptions", f"{_fmt(r['total'])} ({_fmt(r['requests_retracted'])} requests)")
    console.print(t)
    lat = Table(title="Latency (ms): TTST = time to 2nd token, E2E = end-to-end", title_justify="left")
    lat.add_column("metric", style="bold", no_wrap=True)
    lat.add_column("count", justify="right")
    for col in STAT_COLS:
        lat.add_column(col, justify="right")
    for key, label in LATENCY_ROWS:
        s = summary["latency"][key]
        lat.add_row(label, _fmt(s["count"]), *(_fmt(s[c], 1) for c in STAT_COLS))
    console.print(lat)
    _render_interval(summary.get("prediction_interval"), console)
    workers = summary.get("workers") or []
    if len(workers) > 1 or workers and workers[0]["gpus"] > 1:
        wt = Table(title="Workers", title_justify="left")
        for col in ("worker", "GPUs", "requests", "busy %", "passes", "tokens", "prefix reuse %"):
            wt.add_column(col, justify="right")
        for w in workers[:32]:
            wt.add_row(str(w["worker"]), str(w["gpus"]), _fmt(w["requests"]), f"{w['utilization'] * 100:.1f}",
                       _fmt(w["passes"]), _fmt(w["tokens"]), _percent(w["prefix_reuse_ratio"], sign=""))
        if len(workers) > 32:
            wt.add_row("...", "", "", "", "", "", "")
        console.print(wt)
    fleet = summary.get("fleet")
    if fleet:
        console.print(f"Fleet: {fleet['workers']} workers, {fleet['gpus']} GPUs, "
                      f"{fleet['gpu_hours']:.2f} GPU-hours, mean utilisation {fleet['mean_utilization'] * 100:.1f}%")
    run = summary.get("run", {})
    wall = (host or {}).get("wall_s")
    console.print(f"Simulated {_fmt(run.get('sim_end_s'))} s of virtual time in "
                  f"{_fmt(wall, 3)} s of wall time ({_fmt(run.get('events'))} events, {run.get('mode')} mode).")


def _render_interval(pi: dict | None, console: Console) -> None:
    """One line per metric: where the measured mean is expected to lie (the calibration's
    cross-validated error band for this deployment's situation and group)."""
    if not pi:
        return
    if not pi.get("available"):
        console.print(f"Expected error: n/a ({pi.get('reason')})")
        return
    cov = pi.get("coverage") or 0.0
    console.print(f"Expected error ({cov:.0%} of held-out points, {pi['basis']} cross-validation of "
                  f"{pi['group']}, n={pi['n']}; {pi['situation'].replace('_', ' ')}):")
    for metric, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
        m = pi[metric]
        if m["mean"] is None:
            continue
        high = "n/a" if m["high"] is None else f"{m['high']:,.1f}"
        console.print(f"  mean {label} {m['mean']:,.1f} ms: measured likely {m['low']:,.1f} – {high} ms "
                      f"(error {m['error_low']:+.0%} … {m['error_high']:+.0%}, mean |error| {m['mape']:.0%})")
