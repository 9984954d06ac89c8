"""Summary accounting at the edges: a time-limited run, warm-up retractions, the console
header of a disaggregated deployment, and one throughput span for predict and validate."""

from __future__ import annotations

import numpy as np

from servesim.api import predict
from servesim.metrics.recorder import Status
from servesim.validate.simulate import score

NO_FILES = ["output.dir=null"]


def test_a_time_limited_run_ends_at_the_limit_and_names_requests_that_never_arrived():
    limit = 20.0
    pred = predict(None, NO_FILES + ["workload.num_requests=400", f"simulation.max_sim_time_s={limit}"])
    assert pred.summary["run"]["sim_end_s"] == limit  # not the first event past it
    rec = pred.recorder
    unfinished = np.flatnonzero(rec.column("status") == Status.UNFINISHED)
    arrival = rec.column("arrival")
    reasons = {rec.reason[i] for i in unfinished}
    assert reasons == {"simulation time limit reached", "not arrived before the simulation time limit"}
    for i in unfinished:
        came = not np.isnan(arrival[i])
        assert came == (rec.reason[i] == "simulation time limit reached")
        if came:
            assert arrival[i] <= limit
    by_reason = pred.summary["requests"]["unfinished_by_reason"]
    assert sum(by_reason.values()) == unfinished.size


def _closed_loop_with_retractions() -> dict:
    return {
        "seed": 0,
        "workload": {"kind": "closed_loop", "recipe": "fixed", "concurrency": 48, "num_prompts": 96,
                     "warmup": 48, "isl": 2048, "osl": 512},
        "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm",
                       "engine": {"name": "vllm", "gpu_memory_utilization": 0.245}},
        "output": {"dir": None},
    }


def test_retractions_count_measured_requests_only():
    pred = predict(_closed_loop_with_retractions())
    rec = pred.recorder
    retr = rec.column("retractions")
    warm = rec.is_warmup
    assert retr[warm].sum() > 0 and retr[~warm].sum() > 0  # both kinds retract in this run
    r = pred.summary["retractions"]
    assert r["total"] == int(retr[~warm].sum())
    assert r["requests_retracted"] == int((retr[~warm] > 0).sum())


def test_validate_and_predict_divide_throughput_by_the_same_span():
    """The span starts at the first measured arrival, also when that request was rejected."""
    cfg = {"seed": 0,
           "workload": {"kind": "synthetic", "num_requests": 30, "arrival": {"process": "poisson", "rate": 4.0},
                        "input": {"dist": "uniform", "low": 100, "high": 3000}, "output": {"dist": "fixed", "value": 32}},
           "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm",
                          "engine": {"name": "sglang", "context_length": 1500}},
           "output": {"dir": None}}
    pred = predict(cfg)
    rec = pred.recorder
    first = int(np.nanargmin(rec.column("arrival")))
    assert rec.column("status")[first] == Status.REJECTED  # what makes the two definitions differ
    res = score(rec, pred.deployment.total_gpus)
    assert res.tput_per_gpu == pred.summary["throughput"]["total_tokens_per_s_per_gpu"]


def test_a_disaggregated_header_shows_its_pools_not_the_ignored_tp_and_workers():
    cfg = {
        "workload": {"kind": "synthetic", "num_requests": 20, "arrival": {"process": "poisson", "rate": 5.0},
                     "input": {"dist": "fixed", "value": 512}, "output": {"dist": "fixed", "value": 16}},
        "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "tp": 1, "workers": 1,
                       "disaggregation": {"prefill": {"workers": 2, "tp": 1}, "decode": {"workers": 1, "tp": 2}}},
        "output": {"dir": None},
    }
    head = predict(cfg).header()
    assert head["prefill"] == "2 × tp 1" and head["decode"] == "1 × tp 2"
    assert "tp" not in head and "workers" not in head
    cfg["deployment"]["disaggregation"]["decode"] = {"workers": 1, "tp": 1, "attention_dp": 2,
                                                     "engine": {"name": "vllm"}}
    assert predict(cfg).header()["decode"] == "1 × tp 1 × dp 2 (vllm)"


def _limited(engine: str, mode: str):
    return predict(None, NO_FILES + ["workload.num_requests=150", "simulation.max_sim_time_s=9.5",
                                     f"deployment.engine.name={engine}", f"simulation.mode={mode}"])


def test_a_time_limit_cuts_fast_mode_where_it_cuts_step_mode():
    """A decode stretch is committed only at its end: at the limit the fast mode must still commit
    the passes that ended before it, as the step mode did, and count the pass in flight as busy."""
    for engine in ("sglang", "vllm", "trtllm"):
        step, fast = _limited(engine, "step"), _limited(engine, "fast")
        a, b = step.recorder, fast.recorder
        assert (a.column("status") == Status.UNFINISHED).any()
        for name in ("arrival", "first_token", "second_token", "last_token", "finish"):
            np.testing.assert_allclose(a.column(name), b.column(name), rtol=1e-9, err_msg=f"{engine} {name}")
        for name in ("generated", "emissions", "status"):
            assert a.column(name).tolist() == b.column(name).tolist(), (engine, name)
        assert a.reason == b.reason
        for wa, wb in zip(step.summary["workers"], fast.summary["workers"]):
            assert (wa["passes"], wa["tokens"]) == (wb["passes"], wb["tokens"]), engine
            assert abs(wa["busy_s"] - wb["busy_s"]) < 1e-9, engine
            assert 0 < wa["utilization"] <= 1.0


def test_requests_still_in_the_api_server_at_the_limit_count_as_sent():
    """A slow tokenizer holds most sent requests in the frontend at the limit: they arrived (the
    client sent them), so they are cut by the limit, not 'not arrived'."""
    pred = predict(None, NO_FILES + ["workload.num_requests=300", "workload.sessions=null",
                                     "simulation.max_sim_time_s=10", "perf.frontend.tokenize_per_token_s=5e-3"])
    by_reason = pred.summary["requests"]["unfinished_by_reason"]
    # Poisson at 12/s for 10 s sends ~120; the tokenizer lets a handful through
    assert by_reason["simulation time limit reached"] > 90
    assert by_reason["not arrived before the simulation time limit"] < 210


def test_prefix_reuse_is_undefined_not_zero_when_no_prompt_ran():
    """A ratio over zero prompt tokens has no value: the summary says None, the console "n/a"."""
    from rich.console import Console

    from servesim.report.console import render_summary

    # (an API server's tokenizer holds the first request past the limit: no prompt is scheduled)
    pred = predict(None, NO_FILES + ["workload.num_requests=5", "simulation.max_sim_time_s=1e-6",
                                     "deployment.workers=2", "client=api-server"])
    assert pred.summary["cache"]["prompt_tokens"] == 0
    assert pred.summary["cache"]["prefix_reuse_ratio"] is None
    assert [w["prefix_reuse_ratio"] for w in pred.summary["workers"]] == [None, None]
    console = Console(record=True, width=200)
    render_summary(pred.summary, {}, console)
    text = console.export_text()
    reuse_row = next(line for line in text.splitlines() if "Prefix-cache reuse" in line)
    assert "n/a" in reuse_row
