"""servesim models / gpus, progress with a known total, --quiet, and the console's warnings and roles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servesim.cli import main
from servesim.config import load_config
from servesim.report import progress as progress_mod
from servesim.report.progress import Progress, expected_requests

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SMALL = ["--set", "workload.num_requests=80"]


def test_models_lists_every_bundled_model_with_its_default_precision(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "deepseek-ai/DeepSeek-V3" in out and "meta-llama/Llama-3.1-8B-Instruct" in out
    line = next(l for l in out.splitlines() if "DeepSeek-V3" in l)
    assert "fp8" in line and "671.0" in line  # FP8 checkpoint, 671B parameters
    assert main(["models", "--aliases"]) == 0
    assert "deepseek-ai/DeepSeek-R1" in capsys.readouterr().out


def test_gpus_lists_memory_and_peaks(capsys):
    assert main(["gpus"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("│ h200_sxm"))
    assert "141" in line and "4.80" in line and "989" in line


def test_total_is_known_for_synthetic_and_trace_workloads():
    assert expected_requests(load_config(None, ["workload.num_requests=123"])) == 123
    cfg = load_config(EXAMPLES / "quickstart.yaml")
    assert expected_requests(cfg) == 1220
    assert expected_requests(load_config(EXAMPLES / "quickstart.yaml", ["workload.limit=100"])) == 100
    assert expected_requests(load_config(EXAMPLES / "quickstart.yaml", ["workload.end_ms=1000"])) is None


@pytest.mark.parametrize("fmt,fixture", [("agentic_mooncake", "v2.jsonl"), ("weka", "weka.jsonl"),
                                         ("servesim_dag", "fanout.dag.jsonl")])
def test_total_of_an_agent_trace_is_its_node_count_not_its_lines(fmt, fixture):
    """An agent trace's lines are not its requests (a header, a play per line, a node per line):
    the config alone says nothing, and predict tells the progress the graph's node count."""
    path = Path(__file__).resolve().parents[1] / "workload" / "agentic_fixtures" / fixture
    cfg = load_config({"workload": {"kind": "trace", "format": fmt, "path": str(path)}, "output": {"dir": None}})
    assert expected_requests(cfg) is None
    from servesim.api import predict

    told = Progress(None, enabled=False)
    pred = predict(cfg, progress=told)
    assert told.total == pred.summary["requests"]["total"] > 0


def test_progress_lines_off_a_terminal_carry_the_total_and_an_eta(capsys, monkeypatch):
    monkeypatch.setattr(progress_mod, "QUIET_FOR_S", 0.0)
    with Progress(1000, enabled=True, terminal=False) as p:
        for done in range(0, 1001, 100):
            p(done, done / 10)
    lines = capsys.readouterr().err.splitlines()
    assert 4 <= len(lines) <= 10 and lines[0].startswith("simulating: 20% (200 of 1,000 requests)")
    assert all("ETA" in line for line in lines)


def test_quiet_keeps_the_summary_and_drops_progress(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(progress_mod, "QUIET_FOR_S", 0.0)
    monkeypatch.setattr(progress_mod, "UPDATE_EVERY", 10)
    assert main(["predict", "--no-files", "--quiet", "--format", "json", *SMALL]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["summary"]["requests"]["total"] == 80
    assert captured.err == ""
    assert main(["predict", "--no-files", "--format", "json", *SMALL]) == 0
    assert "simulating:" in capsys.readouterr().err  # without --quiet: progress on stderr, stdout stays JSON


def test_rejections_lead_the_console_summary(capsys):
    args = ["predict", "--no-files", *SMALL, "--set", "deployment.engine.name=trtllm",
            "--set", "workload.input.median=9000"]
    assert main(args) == 0
    out = capsys.readouterr().out
    warning = out[out.index("Warning:"):]
    assert out.index("Warning:") < out.index("Requests (input)")  # before the figures
    assert "requests rejected" in warning and "max_num_tokens" in " ".join(warning.split())
    assert "enable_chunked_context=true" in " ".join(warning.split())


def test_disaggregated_console_shows_roles(tmp_path, capsys):
    cfg = tmp_path / "dis.yaml"
    cfg.write_text("workload:\n  kind: synthetic\n  num_requests: 80\n  arrival: {process: poisson, rate: 8.0}\n"
                   "  input: {dist: fixed, value: 1000}\n  output: {dist: fixed, value: 50}\n"
                   "deployment:\n  model: meta-llama/Llama-3.1-8B-Instruct\n  gpu: h100_sxm\n"
                   "  disaggregation:\n    prefill: {workers: 2}\n    decode: {workers: 1}\n")
    assert main(["predict", str(cfg), "--no-files"]) == 0
    out = capsys.readouterr().out
    assert "role" in out and "prefill" in out and "decode" in out
    assert "Decode pool: 1 worker(s)" in out and "Handoff stages" in out


@pytest.mark.parametrize("missing", ["plot", "report"])
def test_plot_and_report_refuse_a_run_with_nothing_to_draw(tmp_path, capsys, missing):
    pytest.importorskip("matplotlib" if missing == "plot" else "plotly")
    run = tmp_path / "run"
    assert main(["predict", "--out", str(run), "--quiet", *SMALL, "--set", "simulation.max_sim_time_s=0.001"]) == 0
    capsys.readouterr()
    assert main([missing, str(run)]) == 2
    err = capsys.readouterr().err
    assert "nothing to draw" in err and "no completed request" in err


def test_predict_report_with_nothing_to_draw_prints_the_summary_then_fails(tmp_path, capsys):
    pytest.importorskip("plotly")
    args = ["predict", "--out", str(tmp_path / "run"), "--report", *SMALL, "--set", "simulation.max_sim_time_s=0.001"]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert "requests unfinished" in captured.out and "Wrote" in captured.out  # the run's files and summary
    assert "--report: nothing to draw" in captured.err
    assert (tmp_path / "run" / "prediction.json").is_file() and not (tmp_path / "run" / "report.html").exists()


def test_a_reader_that_closes_the_pipe_early_is_not_an_error(capsys):
    """`servesim predict --format json | head -1`: the closed pipe ends the command quietly."""
    import os
    import sys

    r, w = os.pipe()
    os.close(r)  # the reader has gone
    saved = sys.stdout
    with os.fdopen(w, "w") as pipe:
        sys.stdout = pipe
        try:
            rc = main(["predict", "--format", "json", "--quiet", "--no-files", *SMALL])
        finally:
            sys.stdout = saved
    assert rc == 0
    assert "Traceback" not in capsys.readouterr().err
