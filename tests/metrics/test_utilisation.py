"""Load figures beyond "busy": batch and KV occupancy, queue length; roles of disaggregated workers."""

import numpy as np
import pytest

import servesim
from servesim.metrics.utilisation import engine_seats, time_weighted
from servesim.report.advice import fix_for, request_warnings

SMALL = {
    "workload": {"kind": "synthetic", "num_requests": 120, "arrival": {"process": "poisson", "rate": 6.0},
                 "input": {"dist": "fixed", "value": 600}, "output": {"dist": "fixed", "value": 60}},
    "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "engine": {"name": "sglang"},
                   "workers": 2},
    "output": {"dir": None},
}


def test_time_weighted_holds_each_sample_until_the_next():
    # 0 until t=1, then 4 until t=3, then 2 until the end at t=4: (0*1 + 4*2 + 2*1) / 4
    assert time_weighted(np.array([1.0, 3.0]), np.array([4, 2]), 4.0) == pytest.approx(2.5)
    assert time_weighted(np.array([]), np.array([]), 4.0) == 0.0


def test_worker_load_matches_the_time_series():
    pred = servesim.predict(SMALL)
    cols = pred.timeseries.columns()
    end = pred.stats.sim_end
    for row, worker in zip(pred.summary["workers"], pred.stats.workers):
        mine = cols["worker"] == row["worker"]
        t = cols["time_s"][mine]
        held = np.diff(np.append(t, end))
        assert row["mean_running"] == pytest.approx(float((cols["running"][mine] * held).sum() / end))
        assert row["kv_usage_mean"] == pytest.approx(float((cols["kv_usage"][mine] * held).sum() / end))
        assert row["max_waiting"] == int(cols["waiting"][mine].max())
        assert row["seats"] == engine_seats(worker.engine) == worker.engine.max_running
        assert row["batch_occupancy"] == pytest.approx(row["mean_running"] / row["seats"])
        # a lightly loaded worker is busy much of the time but far from full: the point of the figures
        assert 0 < row["batch_occupancy"] < 0.2 and 0 < row["kv_usage_mean"] < row["kv_usage_max"] <= 1
    fleet = pred.summary["fleet"]
    assert fleet["mean_waiting"] == pytest.approx(sum(r["mean_waiting"] for r in pred.summary["workers"]))


def test_without_a_time_series_the_figures_are_null():
    cfg = {**SMALL, "output": {"dir": None, "timeseries": False}}
    row = servesim.predict(cfg).summary["workers"][0]
    assert row["mean_running"] is None and row["kv_usage_mean"] is None and row["seats"] is not None


def test_disaggregated_workers_have_roles_and_decode_requests():
    cfg = {**SMALL, "deployment": {**SMALL["deployment"], "disaggregation": {
        "prefill": {"workers": 2}, "decode": {"workers": 1}}}}
    pred = servesim.predict(cfg)
    rows = pred.summary["workers"]
    assert [r["role"] for r in rows] == ["prefill", "prefill", "decode"]
    handed_off = int((pred.recorder.column("decode_worker") >= 0).sum())
    assert rows[2]["requests"] == handed_off == 120  # the decode worker served every request
    roles = pred.summary["roles"]
    assert roles["prefill"]["workers"] == 2 and roles["decode"]["requests"] == 120
    assert roles["stages"]["transfer_ms"]["count"] == 120 and roles["stages"]["transfer_ms"]["mean"] > 0


def test_a_prefill_workers_running_and_kv_figures_are_its_prefills():
    """A prefill worker's requests leave at their pass's end, so pass-end samples see none: its
    figures come from the prefill intervals.  At a load of about one prompt per pass, the
    time-averaged batch is about the busy share, and the KV peak at least one prompt."""
    cfg = {"workload": {"kind": "synthetic", "num_requests": 200, "arrival": {"process": "constant", "rate": 4.0},
                        "input": {"dist": "fixed", "value": 1000}, "output": {"dist": "fixed", "value": 20}},
           "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm",
                          "disaggregation": {"prefill": {"workers": 1}, "decode": {"workers": 1}}},
           "output": {"dir": None}}
    pred = servesim.predict(cfg)
    prefill = pred.summary["workers"][0]
    assert prefill["role"] == "prefill" and prefill["utilization"] > 0.01
    assert 0.9 <= prefill["mean_running"] / prefill["utilization"] <= 1.5
    capacity = pred.deployment.describe()["prefill"]["kv_capacity_tokens_per_worker"]
    assert prefill["kv_usage_max"] >= 1000 / capacity
    assert 0 < prefill["kv_usage_mean"] <= prefill["kv_usage_max"]
    assert pred.summary["roles"]["prefill"]["mean_kv_usage"] == prefill["kv_usage_mean"]


def test_peak_held_closes_an_interval_before_one_that_starts_at_its_end():
    from servesim.metrics.utilisation import _peak_held

    start, end = np.array([0.0, 1.0, 0.5]), np.array([1.0, 2.0, 1.5])
    assert _peak_held(start, end, np.array([10.0, 20.0, 5.0])) == 25.0  # [1, 1.5): 20 + 5, not 35
    assert _peak_held(np.array([]), np.array([]), np.array([])) == 0.0


def test_rejections_lead_the_summary_with_the_key_that_fixes_them():
    summary = {"requests": {"total": 1000, "completed": 550, "rejected": 450, "unfinished": 0,
                            "rejected_by_reason": {"prompt exceeds max_num_tokens 8192 with chunked context off": 450},
                            "unfinished_by_reason": {}}}
    lines = request_warnings(summary)
    assert lines[0].startswith("45.0% of requests rejected (450 of 1,000): prompt exceeds max_num_tokens")
    assert "deployment.engine.enable_chunked_context=true" in lines[0]
    assert "completed requests only" in lines[-1]
    assert fix_for("not arrived before the simulation time limit") == "raise simulation.max_sim_time_s"
    assert "max_model_len" in fix_for("prompt leaves no room for output within max_model_len 4096")
    assert request_warnings({"requests": {**summary["requests"], "rejected": 0, "rejected_by_reason": {}}}) == []


def test_time_weighted_mean_is_the_same_whatever_the_blas_thread_count():
    """A long series' time-weighted mean (the worker load figures) sums in an order the data
    fixes: the same bits with one BLAS thread or two (np.dot split the sum over threads)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import numpy as np; from servesim.metrics.utilisation import time_weighted; "
            "r = np.random.default_rng(3); t = np.sort(r.random(400_000)) * 1e3; v = r.integers(0, 512, t.size); "
            "print(repr(time_weighted(t, v, 1e3)))")
    src = str(Path(__file__).resolve().parents[2] / "src")
    outs = set()
    for threads in ("1", "2"):
        env = dict(os.environ, OPENBLAS_NUM_THREADS=threads, OMP_NUM_THREADS=threads,
                   PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                check=True).stdout.strip())
    assert len(outs) == 1, outs
