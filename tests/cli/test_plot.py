"""`servesim plot` and `servesim predict --plot`: the data each figure shows, and the commands."""

from __future__ import annotations

import builtins
import csv
import math

import numpy as np
import pyarrow.parquet as pq
import pytest

from servesim.cli import main
from servesim.report import plots
from servesim.report.plots import PlotError, latency_cdfs, timeline_series, validation_pairs
from test_cli_predict import SMALL, write_config

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path) -> bool:
    data = path.read_bytes()
    return data[:8] == PNG_MAGIC and len(data) > 10_000  # a drawn figure, not an empty canvas


# ------------------------------------------------------------------------------ data
def test_latency_cdfs_keep_completed_measured_requests_sorted_in_ms():
    requests = {
        "status": np.array(["completed", "completed", "rejected", "completed", "unfinished"]),
        "warmup": np.array([False, False, False, True, False]),
        "ttft_s": np.array([0.3, 0.1, math.nan, 0.05, math.nan]),
        "tpot_s": np.array([0.02, math.nan, math.nan, 0.01, math.nan]),  # one-token request: NaN
        "e2e_s": np.array([2.0, 0.1, 0.0, 1.0, 5.0]),
        "queue_s": np.array([0.0, 0.05, math.nan, 0.0, 1.0]),
    }
    cdfs = latency_cdfs(requests)
    assert cdfs["ttft_s"].tolist() == pytest.approx([100.0, 300.0])  # warm-up and non-completed left out
    assert cdfs["tpot_s"].tolist() == pytest.approx([20.0])
    assert cdfs["e2e_s"].tolist() == pytest.approx([100.0, 2000.0])
    assert cdfs["queue_s"].tolist() == pytest.approx([0.0, 50.0])


def test_timeline_sums_workers_carrying_each_ones_latest_sample_forward():
    timeseries = {
        "time_s": np.array([0.5, 1.5, 3.5, 0.9, 2.2]),
        "worker": np.array([0, 0, 0, 1, 1]),
        "running": np.array([1, 3, 2, 10, 20]),
        "waiting": np.array([0, 1, 0, 5, 0]),
        "kv_usage": np.array([0.1, 0.3, 0.2, 0.5, 0.9]),
    }
    requests = {
        "arrival_s": np.array([0.1, 0.2, 1.1, 2.5]),
        "finish_s": np.array([1.2, 3.9, 2.1, 4.0]),
        "status": np.array(["completed", "completed", "rejected", "completed"]),
        "warmup": np.array([False, False, False, True]),
    }
    s = timeline_series(timeseries, requests, bins=4)  # bins end at 1, 2, 3, 4 s
    assert s["time_s"].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert s["running"].tolist() == [1 + 10, 3 + 10, 3 + 20, 2 + 20]
    assert s["waiting"].tolist() == [0 + 5, 1 + 5, 1 + 0, 0 + 0]
    assert s["kv_usage_mean"] == pytest.approx([0.3, 0.4, 0.6, 0.55])
    assert s["kv_usage_max"] == pytest.approx([0.5, 0.5, 0.9, 0.9])
    assert s["arrivals_per_s"].tolist() == [2, 1, 0, 0]  # the warm-up arrival at 2.5 s is left out
    assert s["completions_per_s"].tolist() == [0, 1, 0, 1]  # rejected and warm-up requests are not completions


def test_timeline_bins_are_at_least_a_second_wide():
    timeseries = {"time_s": np.array([0.0, 7.0]), "worker": np.array([0, 0]), "running": np.array([1, 1]),
                  "waiting": np.array([0, 0]), "kv_usage": np.array([0.0, 0.0])}
    requests = {"arrival_s": np.array([0.0]), "finish_s": np.array([10.0]), "status": np.array(["completed"]),
                "warmup": np.array([False])}
    assert timeline_series(timeseries, requests)["time_s"].size == 10
    requests["finish_s"] = np.array([10_000.0])
    assert timeline_series(timeseries, requests)["time_s"].size == plots.TIMELINE_BINS


def _validate_rows():
    base = {"model": "m", "system": "h100_sxm", "precision": "bf16", "tp": "1", "ep": "1", "concurrency": "4",
            "isl": "1024", "osl": "1024", "workload": "inferencex_random", "predicted_tput_per_gpu": "1",
            "host_seconds": "0.1"}
    return [
        dict(base, id="a", backend="vllm", status="ok", measured_mean_ttft_ms="100", measured_mean_tpot_ms="10",
             predicted_mean_ttft_ms="120", predicted_mean_tpot_ms="9"),
        dict(base, id="b", backend="sglang", status="ok", measured_mean_ttft_ms="200", measured_mean_tpot_ms="20",
             predicted_mean_ttft_ms="150", predicted_mean_tpot_ms="22"),
        dict(base, id="c", backend="trtllm", status="unsupported: attention dp", measured_mean_ttft_ms="50",
             measured_mean_tpot_ms="5", predicted_mean_ttft_ms="", predicted_mean_tpot_ms=""),
    ]


def _write_results(path):
    """A small `servesim validate --out` file."""
    rows = _validate_rows()
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def test_validation_pairs_take_the_simulated_points_only():
    pairs = validation_pairs(_validate_rows())
    assert pairs["ttft"]["measured"].tolist() == [100.0, 200.0]
    assert pairs["ttft"]["predicted"].tolist() == [120.0, 150.0]
    assert pairs["tpot"]["backend"].tolist() == ["vllm", "sglang"]


def test_validation_csv_without_the_columns_is_a_clear_error(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(PlotError, match=r"other.csv: missing column.*servesim validate --out"):
        plots.plot_validation(path)


# ------------------------------------------------------------------------------ commands
def test_predict_plot_draws_figures_of_the_files_it_wrote(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "run"
    assert main(["predict", str(write_config(tmp_path, SMALL)), "--out", str(out), "--plot", "--quiet"]) == 0
    assert _is_png(out / "latency.png") and _is_png(out / "timeline.png")
    # the figure's TTFT curve is the file's completed measured requests
    table = pq.read_table(out / "requests.parquet")
    ttft = table.column("ttft_s").to_numpy()[table.column("status").to_numpy(zero_copy_only=False) == "completed"]
    cols = ["status", "warmup"] + [c for c, _ in plots.LATENCY_COLUMNS]
    cdfs = latency_cdfs({c: table.column(c).to_numpy(zero_copy_only=False) for c in cols})
    assert cdfs["ttft_s"] == pytest.approx(np.sort(ttft) * 1e3)
    # `servesim plot` on the folder draws the same figures elsewhere
    assert main(["plot", str(out), "--out", str(tmp_path / "figs")]) == 0
    assert _is_png(tmp_path / "figs" / "latency.png") and _is_png(tmp_path / "figs" / "timeline.png")


def test_a_new_run_removes_the_figures_of_the_last_one(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "run"
    cfg = str(write_config(tmp_path, SMALL))
    assert main(["predict", cfg, "--out", str(out), "--plot", "--quiet"]) == 0
    assert main(["predict", cfg, "--out", str(out), "--quiet"]) == 0
    assert not (out / "latency.png").exists() and not (out / "timeline.png").exists()


def test_plot_without_timeseries_draws_latency_only(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    cfg = dict(SMALL, output={"timeseries": False})
    out = tmp_path / "run"
    assert main(["predict", str(write_config(tmp_path, cfg)), "--out", str(out), "--quiet"]) == 0
    assert main(["plot", str(out)]) == 0
    assert _is_png(out / "latency.png") and not (out / "timeline.png").exists()
    assert "timeline.png not drawn" in capsys.readouterr().out
    # predict --plot likewise draws what the files allow
    out2 = tmp_path / "run2"
    assert main(["predict", str(write_config(tmp_path, cfg)), "--out", str(out2), "--plot"]) == 0
    assert _is_png(out2 / "latency.png") and not (out2 / "timeline.png").exists()
    assert "latency.png" in capsys.readouterr().out
    # and says up front, before running, when requests.parquet will be missing
    no_requests = dict(SMALL, output={"requests": False})
    assert main(["predict", str(write_config(tmp_path, no_requests)), "--out", str(tmp_path / "r3"), "--plot"]) == 2
    assert "output.requests: true" in capsys.readouterr().err
    assert not (tmp_path / "r3" / "prediction.json").exists()


def test_plot_validate_results(tmp_path):
    pytest.importorskip("matplotlib")
    path = _write_results(tmp_path / "results.csv")
    assert main(["plot", str(path)]) == 0
    assert _is_png(tmp_path / "results.png")


def test_plot_errors_name_what_to_fix(tmp_path, capsys):
    assert main(["plot", str(tmp_path / "missing")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["plot", str(tmp_path / "empty")]) == 2
    assert "requests.parquet: no such file" in capsys.readouterr().err
    assert main(["predict", str(write_config(tmp_path, SMALL)), "--no-files", "--plot"]) == 2
    assert "needs an output folder" in capsys.readouterr().err


def test_missing_matplotlib_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    out = tmp_path / "run"
    assert main(["predict", str(write_config(tmp_path, SMALL)), "--out", str(out), "--plot"]) == 2
    assert "pip install 'servesim[plot]'" in capsys.readouterr().err
    assert not (out / "prediction.json").exists()  # reported before the run, not after it


@pytest.mark.parametrize("content", [b"", b"a,b\n", b"\x89\x00\xff", "{}".format(",".join(plots.VALIDATION_COLUMNS)).encode() + b"\n"])
def test_plot_refuses_files_that_are_not_validate_results(tmp_path, capsys, content):
    path = tmp_path / "x.csv"
    path.write_bytes(content)
    assert main(["plot", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and ("missing column" in err or "not a CSV" in err or "no points" in err)
    assert not (tmp_path / "x.png").exists()


def test_timeline_shows_idle_workers_as_idle():
    """Workers record a row as they go idle, so a sparse run's timeline is not busy throughout."""
    from servesim.api import predict

    cfg = {"seed": 3, "output": {"dir": None},
           "workload": {"kind": "synthetic", "num_requests": 20, "arrival": {"process": "constant", "rate": 0.2},
                        "input": {"dist": "fixed", "value": 300}, "output": {"dist": "fixed", "value": 20}},
           "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm"}}
    pred = predict(cfg)
    rec = pred.recorder
    requests = {"arrival_s": rec.column("arrival"), "finish_s": rec.column("finish"),
                "status": np.array(["completed"] * 20), "warmup": np.zeros(20, bool)}
    s = timeline_series(pred.timeseries.columns(), requests)
    busy = ((rec.column("first_scheduled")[:, None] <= s["time_s"]) & (s["time_s"] < rec.column("finish")[:, None])).any(0)
    assert busy.mean() < 0.2  # requests take well under a second of every five
    assert ((s["running"] > 0) == busy).mean() > 0.95  # the timeline agrees with the requests' own intervals


def test_plot_out_names(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = _write_results(tmp_path / "results.csv")
    folder = tmp_path / "figs"
    folder.mkdir()
    for out, expected in ((folder, folder / "results.png"), (tmp_path / "noext", tmp_path / "noext.png")):
        assert main(["plot", str(path), "--out", str(out)]) == 0
        assert _is_png(expected) and f"Wrote {expected}" in capsys.readouterr().out
    assert main(["plot", str(path), "--out", ""]) == 2
    assert "expected a file name" in capsys.readouterr().err
    # a run's figures need a folder
    run = tmp_path / "run"
    assert main(["predict", str(write_config(tmp_path, SMALL)), "--out", str(run), "--quiet"]) == 0
    assert main(["plot", str(run), "--out", str(path)]) == 2
    assert "is a file, expected a folder" in capsys.readouterr().err
    assert main(["plot", str(run), "--out", str(path / "sub")]) == 2
    assert "cannot write figures" in capsys.readouterr().err


def test_titles_describe_each_pool_of_a_disaggregated_run(tmp_path):
    import copy
    import json

    cfg = copy.deepcopy(SMALL)
    cfg["deployment"]["disaggregation"] = {"prefill": {"workers": 3, "tp": 2},
                                           "decode": {"workers": 1, "engine": {"name": "vllm"}}}
    out = tmp_path / "run"
    assert main(["predict", str(write_config(tmp_path, cfg)), "--out", str(out), "--quiet"]) == 0
    assert json.loads((out / "prediction.json").read_text())["config"]["deployment"]["disaggregation"]
    assert plots._title(out) == ("meta-llama/Llama-3.1-8B-Instruct, disaggregated (prefill: 3 × h100_sxm sglang, "
                                 "tp 2; decode: 1 × h100_sxm vllm, tp 1)")
