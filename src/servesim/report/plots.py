"""``servesim plot``: figures of a run's output files and of ``servesim validate`` results.

A run folder (``servesim predict``'s output) gives two figures:

* ``latency.png``: the distribution (empirical CDF) of TTFT, TPOT, end-to-end latency and
  queue time over completed measured requests, p50 and p99 marked;
* ``timeline.png``: over virtual time, requests running and waiting (all workers), KV usage
  (mean and busiest worker) and arrivals and completions per second.

A ``servesim validate`` results CSV gives ``<name>.png``: predicted against measured mean TTFT
and TPOT, log-log, one colour per engine, with the ±20% band and the MAPE in the titles.

The data each figure shows is computed by plain functions (:func:`latency_cdfs`,
:func:`timeline_series`, :func:`validation_pairs`) that tests check against the files; the
drawing functions only lay them out.  matplotlib is an optional extra (``servesim[plot]``),
imported only here, with the non-interactive Agg backend.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from servesim.errors import ServesimError

#: Latency panels: (requests.parquet column, label).
LATENCY_COLUMNS = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "end-to-end"), ("queue_s", "queue time"))
#: Most intervals of the timeline's common grid (each worker's last sample in one carries forward);
#: intervals are at least :data:`TIMELINE_MIN_BIN_S` wide, the timeseries' default sampling.
TIMELINE_BINS = 400
TIMELINE_MIN_BIN_S = 1.0


class PlotError(ServesimError):
    """The input of ``servesim plot`` cannot be drawn (missing file, column or matplotlib)."""


def require_matplotlib():
    """matplotlib.pyplot on the Agg backend, or a :class:`PlotError` saying how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise PlotError("plots need matplotlib: pip install 'servesim[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _read_parquet(path: Path, columns: list[str]) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq

    if not path.is_file():
        raise PlotError(f"{path}: no such file (run `servesim predict` with output files on)")
    have = set(pq.read_schema(path).names)
    missing = [c for c in columns if c not in have]
    if missing:
        raise PlotError(f"{path}: missing column(s) {missing}; is it a servesim output file?")
    table = pq.read_table(path, columns=columns)
    return {c: table.column(c).to_numpy(zero_copy_only=False) for c in columns}


# ---------------------------------------------------------------------------------- data
def latency_cdfs(requests: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Sorted latencies in ms of completed measured requests, per :data:`LATENCY_COLUMNS` column.

    NaN (undefined, e.g. TPOT of a one-token request) is left out; the CDF of ``x`` is
    ``(arange(n) + 1) / n``.
    """
    keep = (requests["status"] == "completed") & ~requests["warmup"].astype(bool)
    out: dict[str, np.ndarray] = {}
    for col, _ in LATENCY_COLUMNS:
        v = requests[col][keep].astype(float) * 1e3
        out[col] = np.sort(v[~np.isnan(v)])
    return out


def _bin_edges(t0: float, t1: float, bins: int) -> np.ndarray:
    if not t1 > t0:
        t1 = t0 + 1.0
    return np.linspace(t0, t1, bins + 1)


def timeline_series(timeseries: dict[str, np.ndarray], requests: dict[str, np.ndarray],
                    bins: int | None = None) -> dict[str, np.ndarray]:
    """The timeline's curves on a common grid of ``bins`` intervals (``time_s``: their ends).

    ``bins`` defaults to one per :data:`TIMELINE_MIN_BIN_S` of the run, at most
    :data:`TIMELINE_BINS` (a one-sample bin of arrivals per second is mostly noise).

    ``running`` / ``waiting``: summed over workers, each worker's latest sample at or before
    the bin's end (0 before its first sample); ``kv_usage_mean`` / ``kv_usage_max``: over
    workers, likewise; ``arrivals_per_s`` / ``completions_per_s``: measured requests arriving
    / completing in the bin, divided by its width.
    """
    arrival = requests["arrival_s"].astype(float)
    finish = requests["finish_s"].astype(float)
    t_s = timeseries["time_s"].astype(float)
    end = max(float(np.nanmax(finish)) if finish.size else 0.0, float(t_s.max()) if t_s.size else 0.0)
    if bins is None:
        bins = int(min(TIMELINE_BINS, max(1, math.ceil(end / TIMELINE_MIN_BIN_S))))
    edges = _bin_edges(0.0, end, bins)
    ends = edges[1:]
    workers = np.unique(timeseries["worker"])
    stacked = {k: np.zeros((len(workers), bins)) for k in ("running", "waiting", "kv_usage")}
    for i, w in enumerate(workers):
        rows = timeseries["worker"] == w
        tw = t_s[rows]
        order = np.argsort(tw, kind="stable")
        tw = tw[order]
        last = np.searchsorted(tw, ends, side="right") - 1  # latest sample at or before each end
        seen = last >= 0
        for k in stacked:
            v = timeseries[k][rows][order].astype(float)
            stacked[k][i, seen] = v[last[seen]]
    width = edges[1] - edges[0]
    measured = ~requests["warmup"].astype(bool)
    done = measured & (requests["status"] == "completed")
    return {
        "time_s": ends,
        "running": stacked["running"].sum(axis=0),
        "waiting": stacked["waiting"].sum(axis=0),
        "kv_usage_mean": stacked["kv_usage"].mean(axis=0) if len(workers) else np.zeros(bins),
        "kv_usage_max": stacked["kv_usage"].max(axis=0) if len(workers) else np.zeros(bins),
        "arrivals_per_s": np.histogram(arrival[measured], edges)[0] / width,
        "completions_per_s": np.histogram(finish[done], edges)[0] / width,
    }


#: The columns of a ``servesim validate --out`` file that the figure reads.
VALIDATION_COLUMNS = ("backend", "status", "measured_mean_ttft_ms", "measured_mean_tpot_ms",
                      "predicted_mean_ttft_ms", "predicted_mean_tpot_ms")


def validation_pairs(rows: list[dict[str, str]], source: str = "results") -> dict[str, dict[str, np.ndarray]]:
    """``{metric: {"measured", "predicted", "backend"}}`` of the rows with status ``ok`` and both values."""
    if rows:
        _check_columns(list(rows[0]), source)
    out: dict[str, dict[str, np.ndarray]] = {}
    for metric in ("ttft", "tpot"):
        meas, pred, backend = [], [], []
        for r in rows:
            if r["status"] != "ok":
                continue
            m, p = _float(r[f"measured_mean_{metric}_ms"]), _float(r[f"predicted_mean_{metric}_ms"])
            if m > 0 and p > 0:
                meas.append(m)
                pred.append(p)
                backend.append(r["backend"])
        out[metric] = {"measured": np.array(meas), "predicted": np.array(pred), "backend": np.array(backend)}
    return out


def _check_columns(columns: list[str] | None, source: str) -> None:
    missing = [c for c in VALIDATION_COLUMNS if c not in (columns or [])]
    if missing:
        raise PlotError(f"{source}: missing column(s) {missing}; is it a `servesim validate --out` file?")


def _float(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


# ---------------------------------------------------------------------------------- figures
def _layout(spec: dict, fallback: dict) -> str:
    """``N × <gpu> <engine>, tp T[, attention dp D]`` of a deployment or a disaggregated pool."""
    def get(key: str):
        v = spec.get(key)
        return v if v is not None else fallback.get(key)

    engine = get("engine") or {}
    engine = engine.get("name", "") if isinstance(engine, dict) else engine
    text = f"{get('workers') or 1} × {get('gpu')} {engine}, tp {get('tp') or 1}"
    dp = get("attention_dp") or 1
    return text + (f", attention dp {dp}" if dp > 1 else "")


def _title(run_dir: Path) -> str:
    """The run's model and layout from its prediction.json (per pool when disaggregated)."""
    path = run_dir / "prediction.json"
    try:
        dep = json.loads(path.read_text())["config"]["deployment"]
    except (OSError, ValueError, KeyError, TypeError):
        return str(run_dir)
    dis = dep.get("disaggregation")
    if dis:
        pools = "; ".join(f"{name}: {_layout(dis.get(name) or {}, dep)}" for name in ("prefill", "decode"))
        return f"{dep.get('model', '')}, disaggregated ({pools})"
    return f"{dep.get('model', '')}: {_layout(dep, {})}"


#: The figures :func:`plot_run` writes into a run's folder.
RUN_FIGURES = ("latency.png", "timeline.png")


def plot_run(run_dir: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Write ``latency.png`` and ``timeline.png`` for a ``servesim predict`` output folder.

    The timeline needs ``timeseries.parquet``; a run without it (``output.timeseries:
    false``) gets the latency figure only (the caller sees which were written).
    """
    run_dir = Path(run_dir)
    out = _figure_folder(out_dir) if out_dir is not None else run_dir
    cols = ["status", "warmup", "arrival_s", "finish_s"] + [c for c, _ in LATENCY_COLUMNS]
    requests = _read_parquet(run_dir / "requests.parquet", cols)
    _require_completed(run_dir, requests)
    ts_path = run_dir / "timeseries.parquet"
    series = (_read_parquet(ts_path, ["time_s", "worker", "running", "waiting", "kv_usage"])
              if ts_path.exists() else None)
    plt = require_matplotlib()
    _writable(out)
    title = _title(run_dir)
    written = [_draw_latency(plt, latency_cdfs(requests), title, out / RUN_FIGURES[0])]
    if series is not None:
        written.append(_draw_timeline(plt, timeline_series(series, requests), title, out / RUN_FIGURES[1]))
    return written


def _require_completed(run_dir: Path, requests: dict[str, np.ndarray]) -> None:
    """A run without a completed measured request has no latency to draw: say so, do not draw blanks."""
    status = requests["status"]
    if ((status == "completed") & ~requests["warmup"].astype(bool)).any():
        return
    counts = ", ".join(f"{int((status == s).sum()):,} {s}" for s in ("rejected", "unfinished") if (status == s).any())
    raise PlotError(f"{run_dir}: nothing to draw: no completed request ({status.size:,} requests"
                    + (f": {counts}" if counts else "") + "; see prediction.json's rejected_by_reason and "
                    "unfinished_by_reason)")


def _figure_folder(out_dir: str | Path) -> Path:
    """``--out`` of a run's figures: a folder, not an existing file or an empty name."""
    if str(out_dir) == "":
        raise PlotError("--out: expected a folder for the figures, got ''")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise PlotError(f"--out: {out} is a file, expected a folder for the figures")
    return out


def _figure_file(out_path: str | Path | None, src: Path) -> Path:
    """Where a results CSV's figure goes: ``<csv>.png`` by default; into a folder as
    ``<csv stem>.png``; a name without a suffix gets ``.png`` (as matplotlib would add)."""
    if out_path is None:
        return src.with_suffix(".png")
    if str(out_path) == "":
        raise PlotError("--out: expected a file name for the figure, got ''")
    out = Path(out_path)
    if out.is_dir():
        return out / f"{src.stem}.png"
    return out if out.suffix else out.with_suffix(".png")


def _writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PlotError(f"cannot write figures to {folder} ({exc.strerror or exc})") from None


def _save(fig, plt, path: Path) -> Path:
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise PlotError(f"cannot write {path} ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)
    return path


def _draw_latency(plt, cdfs: dict[str, np.ndarray], title: str, path: Path) -> Path:
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    for ax, (col, label) in zip(axes.flat, LATENCY_COLUMNS):
        x = cdfs[col]
        ax.set_title(f"{label} ({x.size:,} requests)")
        ax.set_xlabel("ms")
        ax.set_ylabel("share of requests")
        ax.grid(True, alpha=0.3)
        if not x.size:
            ax.text(0.5, 0.5, "no completed request", ha="center", va="center", transform=ax.transAxes)
            continue
        ax.step(x, (np.arange(x.size) + 1) / x.size, where="post")
        if x[0] > 0 and x[-1] / x[0] > 100:  # spans decades: a log axis keeps the bulk readable
            ax.set_xscale("log")
        for q, style in ((50, "--"), (99, ":")):
            v = float(np.percentile(x, q))
            ax.axvline(v, color="gray", linestyle=style, linewidth=1)
            ax.annotate(f"p{q} {v:,.1f}", (v, 0.05 if q == 50 else 0.15), fontsize=8,
                        xytext=(3, 0), textcoords="offset points")
        ax.set_ylim(0, 1.02)
    fig.suptitle(title, fontsize=10)
    return _save(fig, plt, path)


def _draw_timeline(plt, s: dict[str, np.ndarray], title: str, path: Path) -> Path:
    fig, (a, b, c) = plt.subplots(3, 1, figsize=(10, 8), sharex=True, constrained_layout=True)
    t = s["time_s"]
    a.plot(t, s["running"], label="running")
    a.plot(t, s["waiting"], label="waiting")
    a.set_ylabel("requests (all workers)")
    b.plot(t, s["kv_usage_mean"] * 100, label="mean over workers")
    b.plot(t, s["kv_usage_max"] * 100, label="busiest worker", alpha=0.7)
    b.set_ylabel("KV usage %")
    c.plot(t, s["arrivals_per_s"], label="arrivals")
    c.plot(t, s["completions_per_s"], label="completions")
    c.set_ylabel("requests / s")
    c.set_xlabel("virtual time (s)")
    for ax in (a, b, c):
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return _save(fig, plt, path)


def plot_validation(results_csv: str | Path, out_path: str | Path | None = None) -> Path:
    """Write predicted-against-measured scatter plots of a ``servesim validate --out`` CSV."""
    src = Path(results_csv)
    try:
        with src.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            _check_columns(reader.fieldnames, str(src))
            rows = list(reader)
    except OSError as e:
        raise PlotError(f"{src}: cannot read ({e.strerror or e})") from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise PlotError(f"{src}: not a CSV file ({e}); expected a `servesim validate --out` file") from None
    if not rows:
        raise PlotError(f"{src}: no points (only a header); nothing to draw")
    pairs = validation_pairs(rows, str(src))
    out = _figure_file(out_path, src)
    plt = require_matplotlib()
    _writable(out.parent)
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.2), constrained_layout=True)
    for ax, (metric, label) in zip(axes, (("ttft", "mean TTFT (ms)"), ("tpot", "mean TPOT (ms)"))):
        p = pairs[metric]
        m, y = p["measured"], p["predicted"]
        if m.size:
            for backend in sorted(set(p["backend"].tolist())):
                sel = p["backend"] == backend
                ax.scatter(m[sel], y[sel], s=12, alpha=0.7, label=f"{backend} ({int(sel.sum())})")
            lo, hi = float(min(m.min(), y.min())) / 1.5, float(max(m.max(), y.max())) * 1.5
            line = np.array([lo, hi])
            ax.plot(line, line, color="black", linewidth=1)
            ax.fill_between(line, line * 0.8, line * 1.2, color="gray", alpha=0.15, label="±20%")
            ax.set_xscale("log")
            ax.set_yscale("log")
            mape = float(np.mean(np.abs(y - m) / m)) * 100
            ax.set_title(f"{label}: MAPE {mape:.1f}% over {m.size} points")
            ax.legend(fontsize=8, loc="upper left")
        else:
            ax.set_title(f"{label}: no point with status ok")
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"predicted {label}")
        ax.grid(True, alpha=0.3, which="both")
    n_other = sum(1 for r in rows if r["status"] != "ok")
    fig.suptitle(f"{src.name}: {len(rows)} points, {n_other} not simulated (status other than ok)", fontsize=10)
    return _save(fig, plt, out)
