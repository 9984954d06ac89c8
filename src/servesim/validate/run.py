"""``servesim validate``: simulate measured points and score the predictions.

Every input point becomes one output row (none is dropped), with status ``ok``,
``unsupported: <reason>`` or ``error: <message>``.  Predicted TPOT is computed as the
benchmark computes it: per request (e2e − TTFT) / (output tokens − 1), mean over the
measured requests.  Scores: MAPE of mean TTFT and TPOT, share of points within 10% and 20%,
signed bias (mean of (pred − meas) / meas), overall and per (model, GPU, engine).
"""

from __future__ import annotations

import csv
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from servesim.errors import ConfigError, ServesimError
from servesim.perf.calibration import Calibration, load_calibration
from servesim.validate.points import Point
from servesim.validate.simulate import simulate_point

COLUMNS = ("id", "model", "system", "backend", "precision", "tp", "ep", "concurrency", "isl", "osl", "workload",
           "measured_mean_ttft_ms", "measured_mean_tpot_ms", "predicted_mean_ttft_ms", "predicted_mean_tpot_ms",
           "predicted_tput_per_gpu", "status", "host_seconds")


def check_point(point: Point) -> Point:
    """Resolve the point's deployment once: a layout the deployment model refuses (a model that
    does not fit the stated GPUs, a parallelism the engine lacks) makes the point unsupported,
    with the refusal as its reason; any other failure is an error."""
    if point.status != "ok":
        return point
    from servesim.cluster.deployment import build_deployment
    from servesim.config import load_config

    try:
        build_deployment(load_config(point.config))
    except ConfigError as e:
        point.status = f"unsupported: {_one_line(e)}"
        point.config = None
    except ServesimError as e:
        point.status = f"error: {_one_line(e)}"
    return point


def _one_line(e: Exception) -> str:
    return " ".join(part.strip() for part in str(e).splitlines() if part.strip())


@dataclass
class Row:
    point: Point
    pred_ttft: float = math.nan
    pred_tpot: float = math.nan
    pred_tput: float = math.nan
    status: str = ""
    host_seconds: float = 0.0

    def as_dict(self) -> dict:
        r = self.point.row
        tp, ep = self.point.layout

        def f(x: float) -> str:
            return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.6g}"

        return {"id": r["id"], "model": r["model"], "system": r["system"], "backend": r["backend"],
                "precision": r.get("precision", ""), "tp": tp, "ep": ep, "concurrency": r["concurrency"],
                "isl": r["isl"], "osl": r["osl"], "workload": r.get("workload", ""),
                "measured_mean_ttft_ms": r["measured_mean_ttft_ms"],
                "measured_mean_tpot_ms": r["measured_mean_tpot_ms"],
                "predicted_mean_ttft_ms": f(self.pred_ttft), "predicted_mean_tpot_ms": f(self.pred_tpot),
                "predicted_tput_per_gpu": f(self.pred_tput), "status": self.status,
                "host_seconds": f"{self.host_seconds:.3f}"}


def _validate_one(args: tuple[Point, Calibration, str]) -> Row:
    p, cal, perf_model = args
    t0 = time.perf_counter()
    row = Row(p)
    check_point(p)
    if p.status != "ok":
        row.status = p.status
    else:
        analytic, frontend = p.calibration_values(cal)
        try:
            res = simulate_point(p.config, analytic, frontend, perf_model=perf_model)
        except ServesimError as e:
            msg = _one_line(e)
            # the measured tables do not cover every layout: that is coverage, not a failure
            row.status = f"unsupported: aic: {msg}" if perf_model == "aic" else f"error: {msg}"
        except Exception as e:  # a servesim bug: recorded, the run goes on
            row.status = f"error: {type(e).__name__}: {e}"
        else:
            row.pred_ttft, row.pred_tpot, row.pred_tput = res.ttft_ms, res.tpot_ms, res.tput_per_gpu
            row.status = "ok" if res.completed else "error: no measured request completed"
    row.host_seconds = time.perf_counter() - t0
    return row


def validate_points(points: Sequence[Point], calibration: Calibration | None = None,
                    progress: Callable[[int, int, Row], None] | None = None, processes: int = 1,
                    perf_model: str = "analytic") -> list[Row]:
    """Simulate every point (full prompt counts) with its group's calibrated parameters.

    ``processes > 1`` simulates points in worker processes; rows keep the input order.
    ``perf_model`` ``aic`` prices passes from the measured operator tables (the calibration's
    frontend values still apply; its analytic efficiencies do not).
    """
    cal = calibration if calibration is not None else load_calibration(None)
    jobs = [(p, cal, perf_model) for p in points]
    rows: list[Row] = []
    if processes > 1 and len(jobs) > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(processes) as pool:
            for row in pool.imap(_validate_one, jobs, chunksize=1):
                rows.append(row)
                if progress is not None:
                    progress(len(rows), len(jobs), row)
        return rows
    for job in jobs:
        rows.append(_validate_one(job))
        if progress is not None:
            progress(len(rows), len(jobs), rows[-1])
    return rows


def write_rows(rows: Iterable[Row], path: str | Path) -> None:
    with Path(path).open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow(r.as_dict())


@dataclass
class Score:
    n: int = 0
    ttft_err: list = field(default_factory=list)  # signed relative errors
    tpot_err: list = field(default_factory=list)

    def add(self, row: Row) -> None:
        m_ttft, m_tpot = row.point.measured_ttft_ms, row.point.measured_tpot_ms
        self.n += 1
        self.ttft_err.append((row.pred_ttft - m_ttft) / m_ttft)
        self.tpot_err.append((row.pred_tpot - m_tpot) / m_tpot)

    @staticmethod
    def _stats(errs: list) -> dict:
        e = [x for x in errs if not math.isnan(x)]
        if not e:
            return {"mape": math.nan, "within10": math.nan, "within20": math.nan, "bias": math.nan}
        a = [abs(x) for x in e]
        return {"mape": 100 * sum(a) / len(a), "within10": 100 * sum(x <= 0.1 for x in a) / len(a),
                "within20": 100 * sum(x <= 0.2 for x in a) / len(a), "bias": 100 * sum(e) / len(e)}

    def summary(self) -> dict:
        return {"n": self.n, "ttft": self._stats(self.ttft_err), "tpot": self._stats(self.tpot_err)}


def score_rows(rows: Sequence[Row]) -> tuple[dict, dict[tuple, dict], dict]:
    """(overall, per (model, gpu, engine), coverage) scores over the ``ok`` rows."""
    overall = Score()
    per: dict[tuple, Score] = defaultdict(Score)
    cov: dict[str, int] = defaultdict(int)
    for r in rows:
        key = r.status if not r.status.startswith("error") else "error"
        cov[key] += 1
        if r.status == "ok":
            overall.add(r)
            per[(r.point.row["model"], r.point.gpu, r.point.backend)].add(r)
    cov["total"] = len(rows)
    return overall.summary(), {k: v.summary() for k, v in sorted(per.items())}, dict(cov)


def format_report(rows: Sequence[Row], markdown: bool = False) -> str:
    """Coverage and the score table (plain text, or a Markdown table)."""
    overall, per, cov = score_rows(rows)
    lines = []
    n = cov["total"]
    lines.append(f"Coverage: {cov.get('ok', 0)} of {n} points simulated")
    for k, v in sorted(cov.items()):
        if k not in ("ok", "total"):
            lines.append(f"  {v:5d}  {k}")
    hdr = ("group", "n", "TTFT MAPE", "TTFT ≤10%", "TTFT ≤20%", "TTFT bias", "TPOT MAPE", "TPOT ≤10%", "TPOT ≤20%",
           "TPOT bias")

    def cells(name: str, s: dict) -> list[str]:
        t, p = s["ttft"], s["tpot"]
        pct = lambda x: "—" if math.isnan(x) else f"{x:.0f}%"  # noqa: E731
        sgn = lambda x: "—" if math.isnan(x) else f"{x:+.0f}%"  # noqa: E731
        return [name, str(s["n"]), pct(t["mape"]), pct(t["within10"]), pct(t["within20"]), sgn(t["bias"]),
                pct(p["mape"]), pct(p["within10"]), pct(p["within20"]), sgn(p["bias"])]

    table = [cells("overall", overall)] + [cells(f"{m} / {g} / {e}", s) for (m, g, e), s in per.items()]
    if markdown:
        lines.append("")
        lines.append("| " + " | ".join(hdr) + " |")
        lines.append("|" + "|".join("---" for _ in hdr) + "|")
        lines += ["| " + " | ".join(r) + " |" for r in table]
    else:
        widths = [max(len(str(r[i])) for r in [hdr] + table) for i in range(len(hdr))]
        fmt = lambda r: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)  # noqa: E731
                                  for i, (c, w) in enumerate(zip(r, widths)))
        lines.append("")
        lines.append(fmt(hdr))
        lines += [fmt(r) for r in table]
    return "\n".join(lines)
