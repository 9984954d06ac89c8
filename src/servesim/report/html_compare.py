"""Charts and tables across runs (several runs side by side) and of a sweep (its Pareto front).

Runs are compared on the summary's headline figures (:data:`KEY_METRICS`); the table gives
each run's value and its difference from the first run given (the baseline), the charts
overlay the runs' latency distributions and set their headline figures side by side.
"""

from __future__ import annotations

import html

import numpy as np

from servesim.report.html_figures import LATENCIES, _layout, cdf_points, latency_ms, plotly_modules
from servesim.report.run_folder import RunData, SweepData


def _get(summary: dict, path: str):
    node = summary
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


#: (summary path, label, scale, lower is better).
KEY_METRICS = (
    ("requests.completed", "completed requests", 1.0, False),
    ("requests.rejected", "rejected requests", 1.0, True),
    ("throughput.output_tokens_per_s_per_gpu", "output tok/s per GPU", 1.0, False),
    ("throughput.total_tokens_per_s_per_gpu", "total tok/s per GPU", 1.0, False),
    ("throughput.request_per_s", "requests/s", 1.0, False),
    ("latency.ttft_ms.p50", "TTFT p50 (ms)", 1.0, True),
    ("latency.ttft_ms.p99", "TTFT p99 (ms)", 1.0, True),
    ("latency.tpot_ms.p50", "TPOT p50 (ms)", 1.0, True),
    ("latency.tpot_ms.p99", "TPOT p99 (ms)", 1.0, True),
    ("latency.e2e_ms.p50", "E2E p50 (ms)", 1.0, True),
    ("cache.prefix_reuse_ratio", "prefix reuse %", 100.0, False),
    ("retractions.total", "retractions", 1.0, True),
    ("fleet.mean_utilization", "busy %", 100.0, None),
    ("fleet.mean_batch_occupancy", "batch seats used %", 100.0, None),
    ("fleet.mean_kv_usage", "KV usage %", 100.0, None),
    ("slo.attainment_all", "SLO attainment %", 100.0, False),
    ("slo.goodput_request_per_s", "goodput (req/s)", 1.0, False),
    ("slo.goodput_output_tokens_per_s_per_gpu", "goodput tok/s per GPU", 1.0, False),
    ("cost.usd_per_mtok", "$ per M tokens", 1.0, True),
    ("total_gpus", "GPUs", 1.0, None),
)


def metric_rows(runs: list[RunData]) -> list[tuple[str, list[float | None], bool | None]]:
    """(label, value per run, lower is better) of every key metric some run has."""
    rows = []
    for path, label, scale, lower in KEY_METRICS:
        values = [_get(r.summary, path) for r in runs]
        values = [v * scale if isinstance(v, (int, float)) and not isinstance(v, bool) else None for v in values]
        if any(v is not None for v in values):
            rows.append((label, values, lower))
    return rows


def difference(base: float | None, value: float | None) -> float | None:
    """Relative difference of ``value`` from ``base`` (None when undefined)."""
    if base is None or value is None or base == 0:
        return None
    return (value - base) / abs(base)


def comparison_table(runs: list[RunData]) -> str:
    """An HTML table: one row per key metric, one column per run, differences from the first run."""
    head = "".join(f"<th>{html.escape(r.label)}</th>" for r in runs)
    body = []
    for label, values, lower in metric_rows(runs):
        cells = [f"<td>{_num(values[0])}</td>"]
        for v in values[1:]:
            d = difference(values[0], v)
            cls = ""
            if d is not None and lower is not None and abs(d) > 0.005:
                cls = "better" if (d < 0) == lower else "worse"
            delta = f" <span class='delta {cls}'>({d * 100:+.1f}%)</span>" if d is not None else ""
            cells.append(f"<td>{_num(v)}{delta}</td>")
        body.append(f"<tr><th>{html.escape(label)}</th>{''.join(cells)}</tr>")
    return (f"<div class='scroll'><table class='compare'><thead><tr><th>metric</th>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>"
            "<p class='note'>Differences are relative to the first run; green is better, red worse.</p>")


def _num(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.0f}" if abs(v) >= 1000 or float(v).is_integer() else f"{v:,.2f}"


def compare_cdf_figure(runs: list[RunData]):
    go, make_subplots = plotly_modules()
    fig = make_subplots(rows=2, cols=2, subplot_titles=[label for _, label in LATENCIES])
    drawn = False
    for j, run in enumerate(runs):
        for i, (col, label) in enumerate(LATENCIES):
            x = latency_ms(run, col)
            if not x.size:
                continue
            xs, ys = cdf_points(x)
            drawn = True
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line_shape="hv", name=run.label,
                                     legendgroup=run.label, showlegend=i == 0, line=dict(color=_run_colour(j)),
                                     hovertemplate=f"{html.escape(run.label)}: %{{x:,.1f}} ms, %{{y:.3f}}<extra></extra>"),
                          row=i // 2 + 1, col=i % 2 + 1)
            fig.update_xaxes(title_text="ms", row=i // 2 + 1, col=i % 2 + 1)
    if not drawn:
        return None
    fig.update_yaxes(range=[0, 1.02])
    return _layout(fig, "Latency distributions, runs overlaid", 640)


def compare_bars_figure(runs: list[RunData]):
    go, make_subplots = plotly_modules()
    rows = [r for r in metric_rows(runs) if r[0] != "GPUs"][:12]
    cols = 4
    fig = make_subplots(rows=(len(rows) + cols - 1) // cols, cols=cols, subplot_titles=[r[0] for r in rows])
    for i, (label, values, _) in enumerate(rows):
        fig.add_trace(go.Bar(x=[r.label for r in runs], y=values, marker_color=[_run_colour(j) for j in range(len(runs))],
                             hovertemplate="%{x}: %{y:,.2f}<extra></extra>"),
                      row=i // cols + 1, col=i % cols + 1)
    fig.update_layout(showlegend=False)
    return _layout(fig, "Headline figures per run", 260 * ((len(rows) + cols - 1) // cols) + 60)


def _run_colour(j: int) -> str:
    return ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#e377c2", "#8c564b")[j % 8]


# ------------------------------------------------------------------------------- sweeps
def _number(v: float) -> str:
    """A figure as people read it: 2,490 / 12.35 / 0.0123 (never 2.49e+03)."""
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:,.2f}"
    return f"{v:.3g}"


def _hover(sweep: SweepData, i: int) -> str:
    c = sweep.candidates
    parts = [f"candidate {c['candidate'][i]} ({c['status'][i]})"]
    parts += [f"{p[len('param.'):]} = {c[p][i]}" for p in sweep.params]
    for key, label in (("gpus", "GPUs"), ("throughput_per_gpu_tok_s", "tok/s per GPU"),
                       ("per_user_tok_s", "tok/s per user"), ("goodput_rps", "goodput req/s"),
                       ("goodput_tok_s", "goodput tok/s"), ("slo_attainment", "SLO attainment"),
                       ("ttft_p90_ms", "TTFT p90 ms"), ("tpot_p90_ms", "TPOT p90 ms"),
                       ("cost_per_hour_usd", "$/hour"), ("cost_per_mtok_usd", "$/M tokens"),
                       ("slo_met", "SLO met"), ("overloaded", "overloaded")):
        if key in c and c[key][i] is not None and not (isinstance(c[key][i], float) and np.isnan(c[key][i])):
            v = c[key][i]
            parts.append(f"{label}: {_number(v)}" if isinstance(v, (float, np.floating)) else f"{label}: {v}")
    if c["reason"][i]:
        parts.append(f"reason: {c['reason'][i]}")
    return "<br>".join(html.escape(str(p)) for p in parts)


def pareto_figure(sweep: SweepData):
    """Throughput per GPU against tokens per second per user: every feasible candidate, the
    Pareto front joined; hover shows the candidate's parameters and figures."""
    go, _ = plotly_modules()
    c = sweep.candidates
    ok = c["status"] == "ok"
    if not ok.any():
        return None
    x = c["per_user_tok_s"].astype(float)
    y = c["throughput_per_gpu_tok_s"].astype(float)
    front = ok & c["pareto"].astype(bool)
    hover = np.array([_hover(sweep, i) for i in range(x.size)], dtype=object)
    fig = go.Figure()
    rest = ok & ~front
    fig.add_trace(go.Scatter(x=x[rest], y=y[rest], mode="markers", name="feasible", text=hover[rest],
                             hoverinfo="text", marker=dict(color="#9aa5b1", size=9)))
    order = np.argsort(x[front])
    fig.add_trace(go.Scatter(x=x[front][order], y=y[front][order], mode="lines+markers", name="Pareto front",
                             text=hover[front][order], hoverinfo="text",
                             marker=dict(color="#d62728", size=11), line=dict(color="#d62728")))
    fig.update_xaxes(title_text="output tokens per second per user (interactivity)")
    fig.update_yaxes(title_text="output tokens per second per GPU (throughput)")
    return _layout(fig, f"{sweep.label}: throughput against interactivity "
                        f"({int(ok.sum())} feasible of {x.size} candidates)", 560)


def candidates_table(sweep: SweepData) -> str:
    """Every candidate: status, parameters, headline figures, Pareto membership, reason."""
    c = sweep.candidates
    cols = ["candidate", "status", *sweep.params] + [k for k in (
        "gpus", "throughput_per_gpu_tok_s", "per_user_tok_s", "goodput_rps", "slo_attainment", "ttft_p90_ms",
        "tpot_p90_ms", "cost_per_mtok_usd", "slo_met", "overloaded", "pareto", "reason") if k in c]
    head = "".join(f"<th>{html.escape(k.removeprefix('param.'))}</th>" for k in cols)
    rows = []
    for i in range(c["candidate"].size):
        cells = []
        for k in cols:
            v = c[k][i]
            text = _num(float(v)) if isinstance(v, (float, np.floating)) and not np.isnan(v) else (
                "" if isinstance(v, (float, np.floating)) else str(v))
            cells.append(f"<td>{html.escape(text)}</td>")
        rows.append(f"<tr class='{html.escape(str(c['status'][i]))}'>{''.join(cells)}</tr>")
    return (f"<div class='scroll'><table class='candidates'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")
