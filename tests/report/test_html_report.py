"""The HTML report: its data match the run's files, it is self-contained, and it refuses empty input."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

pytest.importorskip("plotly")

from servesim.cli import main  # noqa: E402
from report_fixtures import report_inputs  # noqa: E402, F401 (a fixture)
from servesim.report.html import render_report, slo_table, summary_cards, warning_blocks, write_report  # noqa: E402
from servesim.report.html_compare import difference, metric_rows, pareto_figure  # noqa: E402
from servesim.report.html_figures import (cdf_points, histogram, per_worker, run_figures, time_grid,  # noqa: E402
                                          worker_rates)
from servesim.report.run_folder import ReportError, load_folders  # noqa: E402


def test_cdf_keeps_every_point_of_a_small_sample_and_quantiles_of_a_large_one():
    x, y = cdf_points(np.array([1.0, 2.0, 4.0]))
    assert list(x) == [1, 2, 4] and list(y) == pytest.approx([1 / 3, 2 / 3, 1])
    big = np.sort(np.random.default_rng(0).exponential(size=50_000))
    x, y = cdf_points(big, n=500)
    assert x.size == 500 and y[0] == 0 and y[-1] == 1 and x[-1] == big[-1]
    assert np.interp(0.5, y, x) == pytest.approx(np.median(big), rel=1e-2)


def test_histogram_counts_every_value_and_turns_logarithmic_over_decades():
    v = np.array([1.0, 2.0, 3.0, 500.0])
    _, counts, log = histogram(v, bins=10)
    assert counts.sum() == v.size and log
    _, counts, log = histogram(np.array([10.0, 11.0, 12.0]), bins=5)
    assert counts.sum() == 3 and not log


def test_time_charts_follow_the_time_series(report_inputs):
    runs, _ = load_folders([report_inputs["sglang"]])
    run = runs[0]
    grid = time_grid(run)
    ts = run.timeseries
    running = per_worker(run, "running", grid)
    assert set(running) == set(np.unique(ts["worker"]).tolist())
    w = 0
    rows = ts["worker"] == w
    # each point: the worker's latest sample at or before it
    t_mid = grid[grid.size // 2]
    latest = np.flatnonzero(rows & (ts["time_s"] <= t_mid))[-1]
    assert running[w][grid.size // 2] == ts["running"][latest]
    # tokens per second integrate back to the tokens the samples count
    rates = worker_rates(run, grid)
    widths = np.diff(np.concatenate([[0.0], grid]))
    tokens = (ts["tokens_per_pass"][rows] * ts["passes"][rows]).sum()
    assert (rates[w] * widths).sum() == pytest.approx(tokens)


def test_run_has_every_chart_with_content(report_inputs):
    runs, _ = load_folders([report_inputs["vllm"]])
    keys = [k for k, _ in run_figures(runs[0])]
    assert keys[:7] == ["latency-cdf", "latency-hist", "latency-time", "throughput-time", "queues-time",
                        "kv-time", "cache-time"]
    assert "workers" in keys
    cdf = dict(run_figures(runs[0]))["latency-cdf"]
    ttft = runs[0].requests["ttft_s"][runs[0].completed] * 1e3
    assert cdf.data[0].x[-1] == pytest.approx(np.nanmax(ttft))  # the CDF reaches the slowest request


def test_comparison_gives_differences_from_the_first_run(report_inputs):
    runs, _ = load_folders([report_inputs["sglang"], report_inputs["vllm"]])
    rows = {label: values for label, values, _ in metric_rows(runs)}
    a = runs[0].summary["latency"]["ttft_ms"]["p99"]
    b = runs[1].summary["latency"]["ttft_ms"]["p99"]
    assert rows["TTFT p99 (ms)"] == [pytest.approx(a), pytest.approx(b)]
    assert difference(a, b) == pytest.approx((b - a) / a)
    assert difference(0, 3) is None and difference(None, 3) is None


def test_sweep_pareto_front_is_the_flagged_candidates(report_inputs):
    _, sweeps = load_folders([report_inputs["sweep"]])
    fig = pareto_figure(sweeps[0])
    front = [t for t in fig.data if t.name == "Pareto front"][0]
    assert list(front.x) == [20.0, 35.0, 80.0]  # the pareto rows, by interactivity
    assert "tp = 8" in front.text[-1] and "engine.name = vllm" in front.text[-1]
    feasible = [t for t in fig.data if t.name == "feasible"][0]
    assert list(feasible.x) == [30.0]  # infeasible and failed candidates are not plotted


def test_page_is_self_contained(report_inputs, tmp_path):
    out = write_report([report_inputs["sglang"], report_inputs["vllm"], report_inputs["sweep"]],
                       tmp_path / "r.html")
    page = out.read_text()
    assert "<script src" not in page and "<link" not in page  # nothing fetched when opened
    ours = re.sub(r"<script type='text/javascript'>.*?</script>", "", page, count=1, flags=re.S)  # plotly.js
    assert len(ours) < len(page) - 3_000_000
    assert not re.search(r"""(src|href)=["']https?:""", ours)
    assert "Plotly.newPlot" in page and page.count("<script type='text/javascript'>") == 1  # plotly.js once
    assert "Runs compared" in page and "Sweep: sweep" in page
    assert not (tmp_path / "r.html.part").exists()


def test_cards_show_slo_and_warnings_when_the_summary_has_them(report_inputs):
    runs, _ = load_folders([report_inputs["sglang"]])
    summary = json.loads(json.dumps(runs[0].summary))
    assert "SLO" not in summary_cards(summary) and warning_blocks(summary) == ""
    summary["slo"] = {"objectives": [{"metric": "ttft", "percentile": "p90", "threshold_ms": 500.0,
                                      "observed_ms": 640.0, "attainment": 0.86, "met": False}],
                      "attainment_all": 0.875, "target": 0.9, "meets_target": False,
                      "goodput_request_per_s": 3.25, "goodput_output_tokens_per_s": 410.0,
                      "goodput_output_tokens_per_s_per_gpu": 205.0}
    summary["overload"] = {"overloaded": True, "pending_growth": 812.0, "pending_growth_per_s": 4.5,
                           "pending_at_mid": 10, "pending_at_last_arrival": 822}
    summary["requests"]["rejected"] = 10
    summary["requests"]["rejected_by_reason"] = {"prompt exceeds max_num_tokens 8192 with chunked context off": 10}
    cards = summary_cards(summary)
    assert "SLO attainment" in cards and "87.5%" in cards and "NOT met" in cards and "3.25" in cards
    assert "<th>ttft</th><td>p90</td><td>500.0</td><td>640.0</td><td>86.0%</td><td><b>NO</b>" in slo_table(summary["slo"])
    warn = warning_blocks(summary)
    assert "Overloaded" in warn and "grew by 812" in warn and "10 → 822 pending" in warn
    assert "deployment.engine.enable_chunked_context=true" in warn


def test_nothing_to_draw_is_an_error(report_inputs, tmp_path, capsys):
    import servesim

    cfg = {"workload": {"kind": "synthetic", "num_requests": 20, "arrival": {"process": "poisson", "rate": 5.0},
                        "input": {"dist": "fixed", "value": 100}, "output": {"dist": "fixed", "value": 10}},
           "simulation": {"max_sim_time_s": 0.001}}
    servesim.predict(cfg).write(tmp_path / "empty")
    with pytest.raises(ReportError, match="nothing to draw: .*no completed request"):
        render_report(*load_folders([tmp_path / "empty"]))
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "nothing to draw" in capsys.readouterr().err
    assert not (tmp_path / "empty" / "report.html").exists()
    assert main(["report", str(tmp_path / "missing")]) == 2


def test_predict_report_writes_report_html(tmp_path, capsys):
    args = ["predict", "--out", str(tmp_path / "run"), "--report", "--quiet", "--format", "json",
            "--set", "workload.num_requests=60"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)  # --quiet still prints the summary
    assert doc["report"] == str(tmp_path / "run" / "report.html")
    assert (tmp_path / "run" / "report.html").stat().st_size > 1_000_000  # plotly.js inside


def test_disaggregated_run_shows_its_pools(tmp_path):
    import servesim

    cfg = {"workload": {"kind": "synthetic", "num_requests": 60, "arrival": {"process": "poisson", "rate": 6.0},
                        "input": {"dist": "fixed", "value": 800}, "output": {"dist": "fixed", "value": 40}},
           "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm",
                          "disaggregation": {"prefill": {"workers": 2}, "decode": {"workers": 1}}}}
    servesim.predict(cfg).write(tmp_path / "dis")
    page = write_report([tmp_path / "dis"]).read_text()
    assert "Prefill and decode pools" in page and "<th>decode</th><td>1</td><td>1</td><td>60</td>" in page
    assert "wait for decode admission" in page
    assert "worker 0 (prefill)" in page and "worker 2 (decode)" in page  # the charts' legends


def test_sweep_hover_and_cost_card_read_as_figures():
    from servesim.report.html import _cost_cards
    from servesim.report.html_compare import _number

    assert [_number(v) for v in (2490.4, 12.345, 0.01234)] == ["2,490", "12.35", "0.0123"]
    assert "no token served" in _cost_cards({"usd_per_hour": 9.5, "usd_per_mtok": None})[0]
    assert "$0.42 per million tokens" in _cost_cards({"usd_per_hour": 9.5, "usd_per_mtok": 0.42})[0]


def test_run_without_time_series_draws_no_empty_panel(tmp_path):
    import servesim

    cfg = {"workload": {"kind": "synthetic", "num_requests": 50, "arrival": {"process": "poisson", "rate": 5.0},
                        "input": {"dist": "fixed", "value": 300}, "output": {"dist": "fixed", "value": 20}},
           "deployment": {"workers": 2}, "output": {"timeseries": False}}
    servesim.predict(cfg).write(tmp_path / "run")
    runs, _ = load_folders([tmp_path / "run"])
    figures = dict(run_figures(runs[0]))
    assert not {"queues-time", "kv-time", "cache-time"} & set(figures)
    assert len(figures["throughput-time"].data) == 1 and sum(figures["throughput-time"].data[0].y) > 0
