"""The interactive charts of one run (Plotly figures), built from a :class:`RunData`.

Each builder returns a figure, or ``None`` when the run has nothing for it (e.g. no time series,
no retraction), so the page shows only charts with content.  Large inputs are reduced before
they reach the page: a CDF keeps at most :data:`CDF_POINTS` quantiles, a histogram its bin
counts, a time chart at most :data:`TIME_BINS` points per worker (each worker's latest sample
at or before a point carried forward, as ``servesim plot`` does).  Charts over workers draw one
line per worker up to :data:`MAX_WORKER_LINES`, and beyond that the mean and the busiest.
"""

from __future__ import annotations

import math

import numpy as np

from servesim.report.run_folder import RunData

CDF_POINTS = 1000
HIST_BINS = 50
TIME_BINS = 600
#: Most intervals of the latency-over-time chart (each needs requests for its percentiles).
LATENCY_BINS = 120
MAX_WORKER_LINES = 16
#: (requests.parquet column, label) of the latency charts.
LATENCIES = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "end-to-end"), ("queue_s", "queue time"))


def plotly_modules():
    """``(plotly.graph_objects, plotly.subplots.make_subplots)`` or a ReportError saying how to install."""
    from servesim.report.run_folder import ReportError

    try:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots
    except ImportError:
        raise ReportError("the HTML report needs plotly: pip install 'servesim[report]'") from None
    return go, make_subplots


class no_template:
    """Within it, new figures get no Plotly template (``_layout`` styles them): copying the default
    template into every figure costs more than building the figure.  Restores the caller's default."""

    def __enter__(self):
        import plotly.io as pio

        self._saved = pio.templates.default
        pio.templates.default = None

    def __exit__(self, *exc):
        import plotly.io as pio

        pio.templates.default = self._saved


# ------------------------------------------------------------------------------- data helpers
def latency_ms(run: RunData, column: str) -> np.ndarray:
    """Sorted latencies (ms) of completed measured requests, NaN left out."""
    v = run.requests[column][run.completed].astype(float) * 1e3
    return np.sort(v[~np.isnan(v)])


def cdf_points(sorted_values: np.ndarray, n: int = CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """(x, share of requests ≤ x): every point of a small sample, ``n`` quantiles of a large one."""
    k = sorted_values.size
    if k <= n:
        return sorted_values, (np.arange(k) + 1) / k
    p = np.linspace(0.0, 1.0, n)
    return np.quantile(sorted_values, p), p


def histogram(values: np.ndarray, bins: int = HIST_BINS) -> tuple[np.ndarray, np.ndarray, bool]:
    """(bin centres, counts, log-spaced) of positive latencies; log bins when they span > 2 decades."""
    pos = values[values > 0]
    log = pos.size > 1 and pos.max() / pos.min() > 100
    edges = (np.geomspace(pos.min(), pos.max(), bins + 1) if log
             else np.histogram_bin_edges(values, bins=bins))
    counts, edges = np.histogram(values, edges)
    centres = np.sqrt(edges[:-1] * edges[1:]) if log else (edges[:-1] + edges[1:]) / 2
    return centres, counts, log


def time_grid(run: RunData) -> np.ndarray:
    """Ends of the time charts' intervals: at most :data:`TIME_BINS`, at least 1 s wide."""
    end = float(run.summary.get("run", {}).get("sim_end_s") or 0.0)
    if run.timeseries is not None and run.timeseries["time_s"].size:
        end = max(end, float(run.timeseries["time_s"].max()))
    bins = int(min(TIME_BINS, max(1, math.ceil(end))))
    return np.linspace(0.0, max(end, 1.0), bins + 1)[1:]


def per_worker(run: RunData, field: str, grid: np.ndarray) -> dict[int, np.ndarray]:
    """A time-series field per worker on ``grid``, the latest sample at or before each point (0 before the first)."""
    ts = run.timeseries
    out: dict[int, np.ndarray] = {}
    for w in np.unique(ts["worker"]):
        rows = ts["worker"] == w
        t = ts["time_s"][rows].astype(float)
        order = np.argsort(t, kind="stable")
        v = ts[field][rows][order].astype(float)
        last = np.searchsorted(t[order], grid, side="right") - 1
        line = np.zeros(grid.size)
        line[last >= 0] = v[last[last >= 0]]
        out[int(w)] = line
    return out


def worker_rates(run: RunData, grid: np.ndarray) -> dict[int, np.ndarray]:
    """Tokens computed per second per worker (prefill + decode), on ``grid``: each sample's tokens
    since the previous sample (tokens per pass × passes) spread over the time between them."""
    ts = run.timeseries
    edges = np.concatenate([[0.0], grid])
    out: dict[int, np.ndarray] = {}
    for w in np.unique(ts["worker"]):
        rows = ts["worker"] == w
        t = ts["time_s"][rows].astype(float)
        tokens = ts["tokens_per_pass"][rows].astype(float) * ts["passes"][rows].astype(float)
        counts, _ = np.histogram(t, edges, weights=tokens)
        out[int(w)] = counts / np.diff(edges)
    return out


def binned_percentiles(t: np.ndarray, v: np.ndarray, grid: np.ndarray, qs=(50, 90)) -> dict[int, np.ndarray]:
    """Percentiles of ``v`` per interval of ``grid`` by ``t`` (NaN where an interval is empty)."""
    edges = np.concatenate([[0.0], grid])
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, grid.size - 1)
    out = {q: np.full(grid.size, np.nan) for q in qs}
    order = np.argsort(idx, kind="stable")
    idx, v = idx[order], v[order]
    bounds = np.searchsorted(idx, np.arange(grid.size + 1))
    for i in range(grid.size):
        chunk = v[bounds[i]:bounds[i + 1]]
        chunk = chunk[~np.isnan(chunk)]
        if chunk.size:
            for q in qs:
                out[q][i] = np.percentile(chunk, q)
    return out


def _worker_roles(run: RunData) -> dict[int, str]:
    """Each worker's role in a disaggregated run (prefill / decode); empty otherwise."""
    return {int(w["worker"]): w["role"] for w in run.summary.get("workers") or [] if w.get("role")}


def _lines(by_worker: dict[int, np.ndarray], roles: dict[int, str] | None = None) -> list[tuple[str, np.ndarray]]:
    """One line per worker (named with its role in a disaggregated run), or the mean and the
    maximum over workers when there are many."""
    if len(by_worker) <= MAX_WORKER_LINES:
        roles = roles or {}
        return [(f"worker {w}" + (f" ({roles[w]})" if w in roles else ""), v) for w, v in by_worker.items()]
    stack = np.vstack(list(by_worker.values()))
    return [("mean over workers", stack.mean(axis=0)), ("busiest worker", stack.max(axis=0))]


# ------------------------------------------------------------------------------- figures
def _layout(fig, title: str, height: int = 420):
    fig.update_layout(title=title, height=height, margin=dict(l=60, r=20, t=90, b=50), plot_bgcolor="white",
                      legend=dict(orientation="h", y=-0.18), colorway=PALETTE)
    fig.update_xaxes(gridcolor="#e4e7eb", zerolinecolor="#cbd2d9", linecolor="#cbd2d9")
    fig.update_yaxes(gridcolor="#e4e7eb", zerolinecolor="#cbd2d9", linecolor="#cbd2d9")
    return fig


def latency_cdf_figure(run: RunData):
    go, make_subplots = plotly_modules()
    series = {col: latency_ms(run, col) for col, _ in LATENCIES}
    if not any(v.size for v in series.values()):
        return None
    fig = make_subplots(rows=2, cols=2, subplot_titles=[f"{label} ({series[c].size:,} requests)"
                                                        for c, label in LATENCIES])
    for i, (col, label) in enumerate(LATENCIES):
        x = series[col]
        r, c = divmod(i, 2)
        if not x.size:
            continue
        xs, ys = cdf_points(x)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=label, line_shape="hv",
                                 hovertemplate=f"{label} %{{x:,.1f}} ms<br>share ≤ x: %{{y:.3f}}<extra></extra>"),
                      row=r + 1, col=c + 1)
        if x[0] > 0 and x[-1] / x[0] > 100:
            fig.update_xaxes(type="log", row=r + 1, col=c + 1)
        fig.update_xaxes(title_text="ms", row=r + 1, col=c + 1)
    fig.update_yaxes(range=[0, 1.02])
    fig.update_layout(showlegend=False)
    return _layout(fig, "Latency distributions (CDF over completed requests)", 620)


def latency_histogram_figure(run: RunData):
    go, make_subplots = plotly_modules()
    series = {col: latency_ms(run, col) for col, _ in LATENCIES}
    if not any(v.size for v in series.values()):
        return None
    fig = make_subplots(rows=2, cols=2, subplot_titles=[label for _, label in LATENCIES])
    for i, (col, label) in enumerate(LATENCIES):
        x = series[col]
        r, c = divmod(i, 2)
        if not x.size:
            continue
        centres, counts, log = histogram(x)
        fig.add_trace(go.Bar(x=centres, y=counts, name=label,
                             hovertemplate=f"{label} ≈ %{{x:,.1f}} ms: %{{y:,}} requests<extra></extra>"),
                      row=r + 1, col=c + 1)
        fig.update_xaxes(title_text="ms" + (" (log bins)" if log else ""), type="log" if log else "linear",
                         row=r + 1, col=c + 1)
    fig.update_layout(showlegend=False, bargap=0.02)
    return _layout(fig, "Latency histograms (completed requests)", 620)


def latency_over_time_figure(run: RunData, grid: np.ndarray):
    """p50 and p90 of TTFT and TPOT per interval of arrival time; each worker's p50 too, hidden
    until picked in the legend (a line per worker would hide the fleet's)."""
    go, make_subplots = plotly_modules()
    done = run.completed
    if not done.any():
        return None
    grid = grid[:: max(1, grid.size // LATENCY_BINS)]  # fewer, wider intervals: percentiles need samples
    t = run.requests["arrival_s"][done].astype(float)
    worker = run.requests["worker"][done]
    workers = np.unique(worker)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, subplot_titles=["TTFT (ms) by arrival time",
                                                                          "TPOT (ms) by arrival time"])
    for row, col in ((1, "ttft_s"), (2, "tpot_s")):
        v = run.requests[col][done].astype(float) * 1e3
        pct = binned_percentiles(t, v, grid)
        for q, dash in ((50, "solid"), (90, "dot")):
            fig.add_trace(go.Scatter(x=grid, y=pct[q], mode="lines", name=f"p{q} (all workers)",
                                     line=dict(dash=dash, color="#1f2933" if q == 50 else "#7b8794"),
                                     legendgroup=f"p{q}", showlegend=row == 1), row=row, col=1)
        if 1 < workers.size <= MAX_WORKER_LINES:
            for i, w in enumerate(workers):
                mine = worker == w
                p50 = binned_percentiles(t[mine], v[mine], grid, qs=(50,))[50]
                fig.add_trace(go.Scatter(x=grid, y=p50, mode="lines", name=f"p50 worker {w}", visible="legendonly",
                                         line=dict(color=_colour(i), width=1), legendgroup=f"w{w}",
                                         showlegend=row == 1), row=row, col=1)
    fig.update_xaxes(title_text="virtual time (s)", row=2, col=1)
    return _layout(fig, "Latency over time (click a worker in the legend to show its p50)", 560)


def throughput_figure(run: RunData, grid: np.ndarray):
    """Tokens computed per second per worker (needs the time series) over completed requests'
    output tokens per second by finish time."""
    go, make_subplots = plotly_modules()
    titles = ["Completed requests' output tokens per second (by finish time)"]
    per_worker_panel = run.timeseries is not None
    if per_worker_panel:
        titles.insert(0, "Tokens computed per second, per worker (prefill + decode)")
    fig = make_subplots(rows=len(titles), cols=1, shared_xaxes=True, subplot_titles=titles)
    if per_worker_panel:
        for name, line in _lines(worker_rates(run, grid), _worker_roles(run)):
            fig.add_trace(go.Scatter(x=grid, y=line, mode="lines", name=name), row=1, col=1)
    done = run.completed
    edges = np.concatenate([[0.0], grid])
    out, _ = np.histogram(run.requests["finish_s"][done].astype(float), edges,
                          weights=run.requests["generated_tokens"][done].astype(float))
    fig.add_trace(go.Scatter(x=grid, y=out / np.diff(edges), mode="lines", name="output tok/s (all workers)"),
                  row=len(titles), col=1)
    fig.update_xaxes(title_text="virtual time (s)", row=len(titles), col=1)
    return _layout(fig, "Throughput over time", 300 + 230 * len(titles))


def worker_series_figure(run: RunData, grid: np.ndarray, fields: list[tuple[str, str, float]], title: str):
    """One panel per (time-series field, label, scale), one line per worker."""
    if run.timeseries is None:
        return None
    go, make_subplots = plotly_modules()
    fig = make_subplots(rows=len(fields), cols=1, shared_xaxes=True, subplot_titles=[f[1] for f in fields])
    for row, (field, label, scale) in enumerate(fields, start=1):
        for i, (name, line) in enumerate(_lines(per_worker(run, field, grid), _worker_roles(run))):
            fig.add_trace(go.Scatter(x=grid, y=line * scale, mode="lines", name=name, legendgroup=name,
                                     showlegend=row == 1, line=dict(color=_colour(i))), row=row, col=1)
    fig.update_xaxes(title_text="virtual time (s)", row=len(fields), col=1)
    return _layout(fig, title, 300 + 220 * len(fields))


PALETTE = ("#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880",
           "#FF97FF", "#FECB52")


def _colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def preemption_figure(run: RunData, grid: np.ndarray):
    """Retractions/preemptions: per worker, and retracted requests by the time they ended."""
    r = run.requests
    retr = r["retractions"].astype(int)
    if not retr.any():
        return None
    go, make_subplots = plotly_modules()
    fig = make_subplots(rows=1, cols=2, subplot_titles=["Retractions per worker",
                                                        "Retractions by the request's end time"])
    workers = np.unique(r["worker"][r["worker"] >= 0])
    fig.add_trace(go.Bar(x=[str(w) for w in workers], y=[int(retr[r["worker"] == w].sum()) for w in workers],
                         name="retractions"), row=1, col=1)
    edges = np.concatenate([[0.0], grid])
    counts, _ = np.histogram(r["finish_s"].astype(float), edges, weights=retr.astype(float))
    fig.add_trace(go.Bar(x=grid, y=counts, name="retractions by end time"), row=1, col=2)
    fig.update_xaxes(title_text="worker", type="category", row=1, col=1)
    fig.update_xaxes(title_text="virtual time (s)", row=1, col=2)
    fig.update_layout(showlegend=False)
    return _layout(fig, f"Retractions / preemptions ({int(retr.sum()):,} in {int((retr > 0).sum()):,} requests)")


#: The per-worker comparison's panels: (summary key, label, scale).
WORKER_BARS = (("requests", "requests", 1.0), ("utilization", "busy %", 100.0),
               ("batch_occupancy", "batch seats used %", 100.0), ("kv_usage_mean", "mean KV usage %", 100.0),
               ("mean_waiting", "mean waiting", 1.0), ("prefix_reuse_ratio", "prefix reuse %", 100.0))


def worker_comparison_figure(run: RunData):
    workers = run.summary.get("workers") or []
    if len(workers) < 2:
        return None
    go, make_subplots = plotly_modules()
    names = [f"{w['worker']}" + (f" {w['role']}" if w.get("role") else "") for w in workers]
    r = run.requests
    done = run.completed
    ttft = [latency_ms_of(r["ttft_s"][done & (r["worker"] == w["worker"])]) for w in workers]
    panels = list(WORKER_BARS) + [("ttft_p50", "TTFT p50 (ms)", 1.0)]
    fig = make_subplots(rows=2, cols=4, subplot_titles=[p[1] for p in panels])
    for i, (key, label, scale) in enumerate(panels):
        if key == "ttft_p50":
            y = ttft
        else:
            y = [None if w.get(key) is None else w[key] * scale for w in workers]
        fig.add_trace(go.Bar(x=names, y=y, name=label, hovertemplate="worker %{x}: %{y:,.2f}<extra></extra>"),
                      row=i // 4 + 1, col=i % 4 + 1)
        fig.update_xaxes(type="category", row=i // 4 + 1, col=i % 4 + 1)
    fig.update_layout(showlegend=False)
    return _layout(fig, "Workers compared", 560)


def latency_ms_of(seconds: np.ndarray) -> float | None:
    v = seconds.astype(float)
    v = v[~np.isnan(v)]
    return float(np.percentile(v, 50) * 1e3) if v.size else None


def run_figures(run: RunData) -> list[tuple[str, object]]:
    """(section id, figure) of every chart of one run that has content, in page order."""
    grid = time_grid(run)
    figures = [
        ("latency-cdf", latency_cdf_figure(run)),
        ("latency-hist", latency_histogram_figure(run)),
        ("latency-time", latency_over_time_figure(run, grid)),
        ("throughput-time", throughput_figure(run, grid)),
        ("queues-time", worker_series_figure(run, grid, [("running", "running requests", 1.0),
                                                         ("waiting", "waiting requests", 1.0)],
                                             "Running and waiting requests per worker")),
        ("kv-time", worker_series_figure(run, grid, [("kv_usage", "KV usage % (held by requests)", 100.0)],
                                         "KV-cache usage per worker")),
        ("cache-time", worker_series_figure(run, grid, [("cache_hit_ratio", "prefix-cache hit % (cumulative)",
                                                         100.0)], "Prefix-cache hit ratio per worker")),
        ("preemptions", preemption_figure(run, grid)),
        ("workers", worker_comparison_figure(run)),
    ]
    return [(key, fig) for key, fig in figures if fig is not None]
