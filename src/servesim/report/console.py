"""A console summary in the style of a serving benchmark report."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from servesim.report.advice import run_alerts

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
    for line in run_alerts(summary):
        if line.startswith(("OVERLOADED", "SATURATED")):
            console.print(f"[bold red]{line}[/]", highlight=False)
        else:
            console.print(f"[bold yellow]Warning:[/] {line}", highlight=False)
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
    if req.get("cancelled"):  # only servesim serve's aborted requests (an older summary has no key)
        t.add_row("Cancelled by the client", _fmt(req["cancelled"]))
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
        console.print(_workers_table(workers))
    if summary.get("agentic"):
        render_agentic(summary["agentic"], console)
    fleet = summary.get("fleet")
    if fleet:
        console.print(_fleet_line(fleet), highlight=False)
    for line in _role_lines(summary.get("roles") or {}):
        console.print(line, highlight=False)
    _render_planning(summary, console)
    run = summary.get("run", {})
    wall = (host or {}).get("wall_s")
    console.print(f"Simulated {_fmt(run.get('sim_end_s'))} s of virtual time in "
                  f"{_fmt(wall, 3)} s of wall time ({_fmt(run.get('events'))} events, {run.get('mode')} mode).")
    for line in summary.get("warnings") or []:  # choices the run made on the input's behalf
        console.print(f"[bold yellow]warning:[/] {line}", highlight=False)


def _render_planning(summary: dict, console: Console) -> None:
    """SLO attainment and goodput, cost and energy (docs/planning.md)."""
    slo = summary.get("slo")
    if slo:
        st = Table(title="SLO attainment (share of measured requests within the threshold)", title_justify="left")
        for col in ("metric", "percentile", "threshold ms", "observed ms", "attainment", "met"):
            st.add_column(col, justify="right" if col != "metric" else "left")
        for o in slo["objectives"]:
            st.add_row(o["metric"], o["percentile"], _fmt(o["threshold_ms"], 1), _fmt(o["observed_ms"], 1),
                       _percent(o["attainment"]), "yes" if o["met"] else "[bold red]NO[/]")
        console.print(st)
        console.print(f"Meeting every objective: {_percent(slo['attainment_all'])} of requests "
                      f"(target {_percent(slo['target'])}); goodput {_fmt(slo['goodput_request_per_s'])} req/s, "
                      f"{_fmt(slo['goodput_output_tokens_per_s'])} output tok/s "
                      f"({_fmt(slo['goodput_output_tokens_per_s_per_gpu'])} per GPU)")
    cost = summary.get("cost")
    if cost:
        if cost["usd_per_hour"] is None:
            console.print("Cost: n/a (no price for this GPU: set cost.gpu_hour_usd)")
        else:
            console.print(f"Cost: ${cost['usd_per_hour']:,.2f}/hour for the fleet; per million tokens "
                          f"${_fmt(cost['usd_per_mtok_input'])} input, ${_fmt(cost['usd_per_mtok_output'])} output, "
                          f"${_fmt(cost['usd_per_mtok'])} both (each charged the whole cost)")
    energy = summary.get("energy")
    if energy and energy.get("joules") is not None:
        console.print(f"Energy (power model): {_fmt(energy['j_per_token'], 3)} J per token, "
                      f"{_fmt(energy['j_per_output_token'], 3)} J per output token, "
                      f"mean {_fmt(energy['mean_power_w'], 0)} W for the fleet")


#: The workers table's columns after the identity ones: (header, summary key, format).
WORKER_COLUMNS = (
    ("reqs", "requests", "int"),
    ("busy%", "utilization", "pct"),
    ("batch%", "batch_occupancy", "pct"),
    ("run", "mean_running", "f1"),
    ("wait", "mean_waiting", "f1"),
    ("wait max", "max_waiting", "int"),
    ("KV%", "kv_usage_mean", "pct"),
    ("KV max%", "kv_usage_max", "pct"),
    ("passes", "passes", "int"),
    ("tokens", "tokens", "int"),
    ("reuse%", "prefix_reuse_ratio", "pct"),
)


def _cell(value, kind: str) -> str:
    if value is None:
        return "n/a"
    if kind == "pct":
        return f"{value * 100:.1f}"
    if kind == "f1":
        return f"{value:,.1f}"
    return _fmt(int(value))


def _workers_table(workers: list[dict], limit: int = 32) -> Table:
    """Per worker: busy share and how full it was (batch seats, KV, queue); a role column in
    disaggregated runs.  busy % = time in passes; batch % = mean running / seats; running,
    waiting = time-averaged requests; KV % = mean KV usage (docs/outputs.md)."""
    roles = any("role" in w for w in workers)
    wt = Table(title="Workers: busy = share of time in passes; batch = mean running / seats; run, wait, "
                     "KV = time averages; reuse = prefix-cache reuse", title_justify="left")
    wt.add_column("worker", justify="right")
    if roles:
        wt.add_column("role")
    wt.add_column("GPUs", justify="right")
    for header, _, _ in WORKER_COLUMNS:
        wt.add_column(header, justify="right")
    for w in workers[:limit]:
        ident = [str(w["worker"])] + ([w.get("role", "")] if roles else []) + [str(w["gpus"])]
        wt.add_row(*ident, *(_cell(w.get(key), kind) for _, key, kind in WORKER_COLUMNS))
    if len(workers) > limit:
        wt.add_row("...", *([""] * (len(WORKER_COLUMNS) + 1 + roles)))
    return wt


def _fleet_line(fleet: dict) -> str:
    text = (f"Fleet: {fleet['workers']} workers, {fleet['gpus']} GPUs, {fleet['gpu_hours']:.2f} GPU-hours; "
            f"busy {fleet['mean_utilization'] * 100:.1f}% of the time")
    if fleet.get("mean_batch_occupancy") is not None:
        text += f", batch seats used {fleet['mean_batch_occupancy'] * 100:.1f}%"
    if fleet.get("mean_kv_usage") is not None:
        text += f", KV used {fleet['mean_kv_usage'] * 100:.1f}%"
    if fleet.get("mean_waiting") is not None:
        text += f", {fleet['mean_waiting']:,.1f} requests waiting on average"
    return text


def _role_lines(roles: dict) -> list[str]:
    """Disaggregated runs: one line per pool, and one with the handoff's stages (mean / p90 ms)."""
    lines = []
    for role in ("prefill", "decode"):
        r = roles.get(role)
        if not r:
            continue
        text = (f"{role.capitalize()} pool: {r['workers']} worker(s), {r['gpus']} GPU(s), {r['requests']:,} requests, "
                f"busy {r['mean_utilization'] * 100:.1f}%")
        if r.get("mean_batch_occupancy") is not None:
            text += f", batch {r['mean_batch_occupancy'] * 100:.1f}%"
        if r.get("mean_kv_usage") is not None:
            text += f", KV {r['mean_kv_usage'] * 100:.1f}%"
        if r.get("mean_waiting") is not None:
            text += f", {r['mean_waiting']:,.1f} waiting"
        lines.append(text)
    stages = roles.get("stages")
    if stages:
        parts = [f"{label} {_fmt(stages[key]['mean'], 1)} / {_fmt(stages[key]['p90'], 1)}"
                 for key, label in (("prefill_ms", "prefill"), ("transfer_wait_ms", "link wait"),
                                    ("transfer_ms", "KV transfer"), ("decode_wait_ms", "decode admission"))]
        lines.append("Handoff stages, mean / p90 ms: " + ", ".join(parts))
    return lines


def render_agentic(a: dict, console: Console) -> None:
    """The agentic block: plays, their makespan and final-answer TTFT, reuse, the critical path."""
    nodes = a["nodes"]
    console.print(f"Plays: {_fmt(a['plays'])} ({_fmt(a['plays_completed'])} completed, {_fmt(a['plays_failed'])} failed, "
                  f"{_fmt(a['plays_incomplete'])} incomplete"
                  + (f", {_fmt(a['plays_not_started'])} not started" if a["plays_not_started"] else "") + "); "
                  f"nodes {_fmt(nodes['nodes'])}: {_fmt(nodes['completed'])} completed, {_fmt(nodes['rejected'])} "
                  f"rejected, {_fmt(nodes['unfinished'])} unfinished, {_fmt(nodes.get('cancelled', 0))} cancelled, "
                  f"{_fmt(nodes['skipped'])} skipped, {_fmt(nodes['unsent'])} never sent"
                  + (f", {_fmt(nodes['history'])} history (before the snapshot cut)" if nodes.get("history") else ""))
    if a.get("phases"):
        _render_phases(a["phases"], console)
    t = Table(title="Plays (s): makespan = first dispatch to last terminal, completed plays", title_justify="left")
    t.add_column("metric", style="bold", no_wrap=True)
    t.add_column("count", justify="right")
    for col in STAT_COLS:
        t.add_column(col, justify="right")
    for key, label in (("makespan_s", "Makespan"), ("final_ttft_s", "Final-answer TTFT"),
                       ("slowdown", "Slowdown (x recorded)"), ("ttft_first_turn_s", "TTFT first turns"),
                       ("ttft_later_turns_s", "TTFT later turns")):
        s = a[key]
        t.add_row(label, _fmt(s["count"]), *(_fmt(s[c], 3) for c in STAT_COLS))
    console.print(t)
    share = a["critical_path_share"]
    parts = ", ".join(f"{k.replace('_', ' ')} {_percent(v)}" for k, v in share.items() if v)
    console.print(f"Prefix reuse {_percent(a['prefix_reuse'])} (ideal {_percent(a['ideal_prefix_reuse'])}); "
                  f"peak fan-out {_fmt(a['peak_fanout'])}; critical path: {parts or 'n/a'}")


def _render_phases(ph: dict, console: Console) -> None:
    """AgentX's phases: the warm-up before measurement and the profile's window."""
    line = (f"AgentX phases: {_fmt(ph['snapshot_lanes'])} lanes joined at a snapshot cut; warm-up "
            f"{_fmt(ph['primers'])} primers + {_fmt(ph['lane_warmups'])} lane requests (excluded); measured from "
            f"{_fmt(ph['measure_start_s'], 3)} s")
    if "admission_cutoff_s" in ph:
        line += (f"; admission until {_fmt(ph['admission_cutoff_s'], 3)} s, {_fmt(ph['not_issued_after_cutoff'])} "
                 f"nodes not issued after it, {_fmt(ph['cancelled_at_grace'])} requests cancelled at the grace "
                 "deadline" + (" (the drain timed out)" if ph["drain_timed_out"] else ""))
    console.print(line)


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
