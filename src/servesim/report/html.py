"""``servesim report``: one self-contained HTML file of one or more runs, or of a sweep.

The page opens without network access: Plotly's JavaScript is embedded once, every chart's data
is inline.  For each run: warnings (rejected or unfinished requests with the key that fixes
them, overload), summary cards (requests, latency percentiles, throughput per GPU, cache reuse,
retractions, load, SLO attainment and goodput when the summary has them), then the charts of
``report/html_figures.py``.  Two or more runs get a comparison first (table with differences
from the first run, overlaid distributions, headline bars); a sweep folder gets its Pareto
front and the table of candidates.  Plotly is an optional extra (``servesim[report]``).
"""

from __future__ import annotations

import html
from pathlib import Path

from servesim.plan.overload import saturation_message
from servesim.report.advice import request_warnings
from servesim.report.html_compare import (candidates_table, compare_bars_figure, compare_cdf_figure,
                                          comparison_table, pareto_figure)
from servesim.report.html_figures import no_template, plotly_modules, run_figures
from servesim.report.run_folder import ReportError, RunData, SweepData, load_folders

REPORT_FILE = "report.html"

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1280px;padding:0 24px 48px;
color:#1f2933;background:#fafbfc}
h1{font-size:1.6em;margin:24px 0 4px}h2{margin-top:40px;border-bottom:1px solid #d9e2ec;padding-bottom:4px}
.sub{color:#52606d;margin:0 0 16px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(190px,1fr));gap:10px;margin:12px 0}
.card{background:#fff;border:1px solid #d9e2ec;border-radius:8px;padding:10px 12px}
.card .k{font-size:.8em;color:#52606d}.card .v{font-size:1.35em;font-weight:600;margin-top:2px}
.card .s{font-size:.78em;color:#7b8794}
.warn{background:#fff7e6;border:1px solid #f0b429;border-radius:8px;padding:10px 14px;margin:8px 0}
.alert{background:#ffeeee;border:1px solid #e12d39;border-radius:8px;padding:10px 14px;margin:8px 0}
.chart{background:#fff;border:1px solid #d9e2ec;border-radius:8px;margin:14px 0;padding:4px}
table{border-collapse:collapse;background:#fff;font-size:.9em;margin:10px 0}
th,td{border:1px solid #d9e2ec;padding:4px 8px;text-align:right}thead th{background:#f0f4f8}
tbody th{text-align:left}.delta{font-size:.85em;color:#52606d}.delta.better{color:#18794e}
.delta.worse{color:#c22}.note{color:#7b8794;font-size:.85em}tr.infeasible td,tr.failed td{color:#9aa5b1}
nav a{margin-right:14px}.scroll{overflow-x:auto}
"""

#: Shown at the top if any script fails (the browser test also checks that none does).
_ERROR_HOOK = """<script>
window.__reportErrors=[];
window.addEventListener('error',function(e){window.__reportErrors.push(String(e.message));
var b=document.getElementById('script-errors');if(b){b.style.display='block';b.textContent=
'A chart failed to draw: '+window.__reportErrors.join('; ');}});
</script>"""


# ------------------------------------------------------------------------------- cards
def _card(key: str, value: str, sub: str = "") -> str:
    return (f"<div class='card'><div class='k'>{html.escape(key)}</div><div class='v'>{html.escape(value)}</div>"
            + (f"<div class='s'>{html.escape(sub)}</div>" if sub else "") + "</div>")


def _n(v, digits: int = 1, pct: bool = False) -> str:
    if v is None:
        return "n/a"
    if pct:
        return f"{v * 100:.{digits}f}%"
    return f"{v:,.{digits}f}" if isinstance(v, float) else f"{v:,}"


def roles_table(roles: dict) -> str:
    """Disaggregated runs: each pool's figures and the handoff's stages (ms)."""
    if not roles:
        return ""
    rows = []
    for role in ("prefill", "decode"):
        r = roles.get(role)
        if r:
            rows.append(f"<tr><th>{role}</th><td>{r['workers']}</td><td>{r['gpus']}</td><td>{r['requests']:,}</td>"
                        f"<td>{_n(r['mean_utilization'], pct=True)}</td><td>{_n(r.get('mean_batch_occupancy'), pct=True)}</td>"
                        f"<td>{_n(r.get('mean_kv_usage'), pct=True)}</td><td>{_n(r.get('mean_waiting'))}</td></tr>")
    pools = ("<table><thead><tr><th>pool</th><th>workers</th><th>GPUs</th><th>requests</th><th>busy</th>"
             "<th>batch seats used</th><th>KV used</th><th>waiting</th></tr></thead>"
             f"<tbody>{''.join(rows)}</tbody></table>")
    stages = roles.get("stages") or {}
    labels = (("prefill_ms", "prefill"), ("transfer_wait_ms", "wait for the link"), ("transfer_ms", "KV transfer"),
              ("decode_wait_ms", "wait for decode admission"))
    srows = "".join(f"<tr><th>{label}</th><td>{_n(stages[k].get('mean'))}</td><td>{_n(stages[k].get('p50'))}</td>"
                    f"<td>{_n(stages[k].get('p90'))}</td><td>{_n(stages[k].get('p99'))}</td></tr>"
                    for k, label in labels if k in stages)
    handoff = ("<table><thead><tr><th>handoff stage (ms)</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th>"
               f"</tr></thead><tbody>{srows}</tbody></table>") if srows else ""
    return f"<h3>Prefill and decode pools</h3>{pools}{handoff}"


def summary_cards(summary: dict) -> str:
    """The run's headline figures as cards (SLO attainment and goodput when the summary has them)."""
    req, lat, thr = summary.get("requests", {}), summary.get("latency", {}), summary.get("throughput", {})
    fleet, cache, retr = summary.get("fleet") or {}, summary.get("cache") or {}, summary.get("retractions") or {}

    def pcts(key: str) -> tuple[str, str]:
        s = lat.get(key) or {}
        return _n(s.get("p50")), f"p90 {_n(s.get('p90'))} · p99 {_n(s.get('p99'))} ms"

    cards = [
        _card("completed requests", f"{req.get('completed', 0):,} / {req.get('total', 0):,}",
              f"rejected {req.get('rejected', 0):,} · unfinished {req.get('unfinished', 0):,}"),
        _card("TTFT p50 (ms)", *pcts("ttft_ms")),
        _card("TPOT p50 (ms)", *pcts("tpot_ms")),
        _card("end-to-end p50 (ms)", *pcts("e2e_ms")),
        _card("output tok/s per GPU", _n(thr.get("output_tokens_per_s_per_gpu")),
              f"total {_n(thr.get('total_tokens_per_s_per_gpu'))} tok/s per GPU · {_n(thr.get('request_per_s'), 2)} req/s"),
        _card("prefix-cache reuse", _n(cache.get("prefix_reuse_ratio"), pct=True),
              f"{_n(cache.get('cached_tokens'))} of {_n(cache.get('prompt_tokens'))} prompt tokens"),
        _card("retractions / preemptions", _n(retr.get("total")), f"{_n(retr.get('requests_retracted'))} requests"),
        _card("busy (time in passes)", _n(fleet.get("mean_utilization"), pct=True),
              f"{fleet.get('workers', '?')} workers · {fleet.get('gpus', summary.get('total_gpus', '?'))} GPUs"),
        _card("batch seats used", _n(fleet.get("mean_batch_occupancy"), pct=True),
              f"KV used {_n(fleet.get('mean_kv_usage'), pct=True)} · "
              f"{_n(fleet.get('mean_waiting'))} waiting on average"),
    ]
    cards += _slo_cards(summary.get("slo")) + _cost_cards(summary.get("cost"))
    return f"<div class='cards'>{''.join(cards)}</div>"


def _slo_cards(slo) -> list[str]:
    """SLO attainment and goodput cards, when the run had SLOs (``summary["slo"]``, docs/planning.md)."""
    if not isinstance(slo, dict):
        return []
    cards = []
    if slo.get("attainment_all") is not None:
        target = slo.get("target")
        met = slo.get("meets_target")
        cards.append(_card("SLO attainment (all objectives)", _n(slo["attainment_all"], pct=True),
                           (f"target {_n(target, pct=True)}" if target is not None else "")
                           + ("" if met is None else (" · met" if met else " · NOT met"))))
    if slo.get("goodput_request_per_s") is not None:
        cards.append(_card("goodput (req/s within SLO)", _n(slo["goodput_request_per_s"], 2),
                           f"{_n(slo.get('goodput_output_tokens_per_s'))} output tok/s · "
                           f"{_n(slo.get('goodput_output_tokens_per_s_per_gpu'))} per GPU"))
    return cards


def _cost_cards(cost) -> list[str]:
    if not isinstance(cost, dict) or cost.get("usd_per_hour") is None:
        return []
    per_mtok = cost.get("usd_per_mtok")
    return [_card("cost ($/hour, fleet)", _n(cost["usd_per_hour"], 2),
                  f"${_n(per_mtok, 2)} per million tokens" if per_mtok is not None else "no token served")]


def slo_table(slo) -> str:
    """Each SLO objective: threshold, observed value, attainment, met."""
    objectives = (slo or {}).get("objectives") if isinstance(slo, dict) else None
    if not objectives:
        return ""
    rows = "".join(
        f"<tr><th>{html.escape(str(o.get('metric', '')))}</th><td>{html.escape(str(o.get('percentile', '')))}</td>"
        f"<td>{_n(o.get('threshold_ms'))}</td><td>{_n(o.get('observed_ms'))}</td>"
        f"<td>{_n(o.get('attainment'), pct=True)}</td><td>{'yes' if o.get('met') else '<b>NO</b>'}</td></tr>"
        for o in objectives)
    return ("<h3>Service-level objectives</h3><table><thead><tr><th>metric</th><th>percentile</th>"
            "<th>threshold ms</th><th>observed ms</th><th>attainment</th><th>met</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>")


def warning_blocks(summary: dict) -> str:
    """Overload or saturation, then rejections/unfinished requests (with the key that fixes them)."""
    blocks = []
    overload = summary.get("overload") or {}
    if isinstance(overload, dict) and overload.get("overloaded"):
        detail = ""
        if overload.get("pending_growth") is not None:
            detail = (f"Requests waiting for a first token grew by {overload['pending_growth']:,.0f} over the second "
                      f"half of the arrivals ({overload.get('pending_growth_per_s', 0):,.2f}/s; "
                      f"{overload.get('pending_at_mid', '?')} → {overload.get('pending_at_last_arrival', '?')} pending). ")
        blocks.append("<div class='alert'><b>Overloaded:</b> arrivals outpace what the deployment serves, so "
                      f"queues grow without bound. {html.escape(detail)}Latencies here depend on the run's length, "
                      "not a steady state: add workers (deployment.workers) or lower the load "
                      "(arrival rate, workload.speedup).</div>")
    saturated = saturation_message(overload) if isinstance(overload, dict) else None
    if saturated:
        blocks.append(f"<div class='alert'><b>Saturated:</b> {html.escape(saturated.removeprefix('SATURATED: '))}</div>")
    for line in request_warnings(summary):
        blocks.append(f"<div class='warn'><b>Warning:</b> {html.escape(line)}</div>")
    return "".join(blocks)


# ------------------------------------------------------------------------------- page
def _chart(fig, div_id: str) -> str:
    import plotly.io as pio

    body = pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True,
                               "toImageButtonOptions": {"format": "png", "scale": 2}})
    return f"<div class='chart'>{body}</div>"


def _header(run: RunData) -> str:
    p = run.prediction
    dep = (p.get("config") or {}).get("deployment") or {}
    engine = dep.get("engine") or {}
    engine = engine.get("name", "") if isinstance(engine, dict) else engine
    layout = f"{dep.get('model', '?')} on {dep.get('gpu', '?')}, {engine}"
    if dep.get("disaggregation"):
        dis = dep["disaggregation"]
        layout += (f", disaggregated: {(dis.get('prefill') or {}).get('workers', '?')} prefill / "
                   f"{(dis.get('decode') or {}).get('workers', '?')} decode workers")
    else:
        layout += f", {dep.get('workers', '?')} worker(s) × tp {dep.get('tp', '?')}"
    return f"<p class='sub'>{html.escape(layout)}<br>{html.escape(str(p.get('workload', '')))}</p>"


def _run_section(run: RunData, index: int) -> tuple[str, int]:
    """A run's section and how many charts it has."""
    figs = run_figures(run)
    charts = "".join(_chart(fig, f"run{index}-{key}") for key, fig in figs)
    if not run.completed.any():
        charts = ("<div class='alert'>No completed request in this run: there is no latency to draw.</div>"
                  + charts)
    section = (f"<section id='run{index}'><h2>{html.escape(run.label)}</h2>{_header(run)}"
               f"{warning_blocks(run.summary)}{summary_cards(run.summary)}{slo_table(run.summary.get('slo'))}"
               f"{roles_table(run.summary.get('roles'))}"
               f"{charts}</section>")
    return section, len(figs)


def _sweep_section(sweep: SweepData, index: int) -> tuple[str, int]:
    fig = pareto_figure(sweep)
    c = sweep.candidates
    counts = {s: int((c["status"] == s).sum()) for s in ("ok", "infeasible", "failed")}
    sub = (f"{c['candidate'].size} candidates: {counts['ok']} ok, {counts['infeasible']} infeasible, "
           f"{counts['failed']} failed; swept: {', '.join(p.removeprefix('param.') for p in sweep.params) or 'nothing'}")
    chart = _chart(fig, f"sweep{index}-pareto") if fig is not None else (
        "<div class='alert'>No feasible candidate: no Pareto front to draw.</div>")
    section = (f"<section id='sweep{index}'><h2>Sweep: {html.escape(sweep.label)}</h2>"
               f"<p class='sub'>{html.escape(sub)}</p>{chart}{candidates_table(sweep)}</section>")
    return section, int(fig is not None)


def _comparison_section(runs: list[RunData]) -> tuple[str, int]:
    figs = [f for f in (compare_cdf_figure(runs), compare_bars_figure(runs)) if f is not None]
    charts = "".join(_chart(f, f"compare-{i}") for i, f in enumerate(figs))
    return (f"<section id='compare'><h2>Runs compared</h2>{comparison_table(runs)}{charts}</section>", len(figs))


def nothing_to_draw(runs: list[RunData], sweeps: list[SweepData]) -> str:
    """The error of a report with nothing to draw: what each folder holds instead."""
    parts = []
    for r in runs:
        req = r.summary.get("requests", {})
        parts.append(f"{r.path}: no completed request ({req.get('total', 0):,} requests, "
                     f"{req.get('rejected', 0):,} rejected, {req.get('unfinished', 0):,} unfinished)")
    for s in sweeps:
        parts.append(f"{s.path}: no feasible candidate of {s.candidates['candidate'].size}")
    return "nothing to draw: " + "; ".join(parts)


def render_report(runs: list[RunData], sweeps: list[SweepData], title: str = "servesim report") -> str:
    """The whole page; raises :class:`ReportError` when there is no chart to draw."""
    plotly_modules()
    with no_template():
        return _render(runs, sweeps, title)


def _render(runs: list[RunData], sweeps: list[SweepData], title: str) -> str:
    from plotly.offline import get_plotlyjs

    if not any(r.completed.any() for r in runs) and not any((s.candidates["status"] == "ok").any() for s in sweeps):
        raise ReportError(nothing_to_draw(runs, sweeps))

    sections, n_charts = [], 0
    if len(runs) > 1:
        sec, n = _comparison_section(runs)
        sections.append(sec)
        n_charts += n
    for i, sweep in enumerate(sweeps):
        sec, n = _sweep_section(sweep, i)
        sections.append(sec)
        n_charts += n
    for i, run in enumerate(runs):
        sec, n = _run_section(run, i)
        sections.append(sec)
        n_charts += n
    if n_charts == 0:
        raise ReportError(nothing_to_draw(runs, sweeps))
    nav = "".join(f"<a href='#run{i}'>{html.escape(r.label)}</a>" for i, r in enumerate(runs))
    nav += "".join(f"<a href='#sweep{i}'>sweep {html.escape(s.label)}</a>" for i, s in enumerate(sweeps))
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style>{_ERROR_HOOK}<script type='text/javascript'>{get_plotlyjs()}</script></head>"
            f"<body><h1>{html.escape(title)}</h1><div id='script-errors' class='alert' style='display:none'></div>"
            f"<nav>{nav}</nav>{''.join(sections)}</body></html>")


def write_report(paths: list[str | Path], out: str | Path | None = None) -> Path:
    """Write the report of the run or sweep folders ``paths``; returns the file written.

    ``out`` defaults to ``report.html`` in the single folder given, or in the working directory
    for several.  The file appears under its name only once complete.
    """
    if not paths:
        raise ReportError("servesim report: give at least one run or sweep folder")
    runs, sweeps = load_folders(list(paths))
    title = "servesim report: " + ", ".join([r.label for r in runs] + [s.label for s in sweeps])
    page = render_report(runs, sweeps, title)
    target = Path(out) if out is not None else (Path(paths[0]) / REPORT_FILE if len(paths) == 1
                                                 else Path(REPORT_FILE))
    if target.is_dir():
        target = target / REPORT_FILE
    part = target.with_name(target.name + ".part")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        part.write_text(page, encoding="utf-8")
        part.replace(target)
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise ReportError(f"cannot write {target} ({exc.strerror or exc})") from None
    return target
