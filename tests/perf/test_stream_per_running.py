"""``stream_per_running_s``: a request's tokens reach the client later by its place behind the
requests already decoding in the pass that emitted its first token."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servesim.perf.frontend import Frontend, FrontendParams, running_at_first_token
from servesim.validate.simulate import simulate_point


class _Recorder:
    """The columns apply_stream_latency and running_at_first_token read."""

    def __init__(self, first, last, worker, second=None):
        self.cols = {"first_token": np.array(first, float), "last_token": np.array(last, float),
                     "worker": np.array(worker), "finish": np.array(last, float),
                     "second_token": np.array(second if second is not None else first, float) + 0.5}

    def column(self, name):
        return self.cols[name]


def _hand_built() -> _Recorder:
    # request: A      B    C    D (other worker)  E (no token)  F (joins with C)
    return _Recorder(first=[1.0, 2.0, 3.0, 3.0, np.nan, 3.0], last=[5.0, 3.0, 4.0, 6.0, np.nan, 3.5],
                     worker=[0, 0, 0, 1, 0, 0])


def test_running_counts_the_requests_decoding_through_the_first_token_on_the_same_worker():
    n = running_at_first_token(_hand_built())
    # A: alone; B: A decodes; C: A and B (B's last token comes out in that very pass), not F, which
    # gets its first token in the same pass; D: alone on worker 1 although worker 0 is busy; E
    # never got a token
    assert n[[0, 1, 2, 3, 5]].tolist() == [1.0, 2.0, 3.0, 1.0, 3.0]
    assert math.isnan(n[4])


def _brute_force(first, last, worker):
    out = np.full(first.size, np.nan)
    for i in np.flatnonzero(~np.isnan(first)):
        same = (worker == worker[i]) & ~np.isnan(first)
        out[i] = 1 + np.count_nonzero(same & (first < first[i]) & (first[i] <= last))
    return out


def test_disaggregated_requests_are_counted_on_the_decode_worker_that_streams_them():
    """Two prefill workers feed one decode worker: every request joins that worker's batch."""
    from servesim.api import predict

    cfg = {"seed": 0,
           "workload": {"kind": "synthetic", "num_requests": 80, "arrival": {"process": "poisson", "rate": 8.0},
                        "input": {"dist": "uniform", "low": 200, "high": 2000},
                        "output": {"dist": "uniform", "low": 20, "high": 200}},
           "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "engine": "vllm",
                          "disaggregation": {"prefill": {"workers": 2}, "decode": {"workers": 1}}},
           "output": {"dir": None}}
    rec = predict(cfg).recorder
    decode = rec.column("decode_worker")
    assert np.unique(decode[decode >= 0]).size == 1 and np.unique(rec.column("worker")).size == 2
    streaming = np.where(decode >= 0, decode, rec.column("worker"))
    got = running_at_first_token(rec)
    want = _brute_force(rec.column("first_token"), rec.column("last_token"), streaming)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert got[~np.isnan(got)].tolist() == want[~np.isnan(want)].tolist()
    assert np.nanmax(got) > 5  # a shared decode batch, not two prefill workers' halves


def test_stream_latency_moves_a_requests_tokens_together():
    rec = _hand_built()
    gaps_before = rec.column("second_token") - rec.column("first_token")
    fe = Frontend(FrontendParams(first_token_overhead_s=0.01, stream_per_running_s=0.002))
    fe.apply_stream_latency(rec)
    want = 0.01 + 0.002 * np.array([1.0, 2.0, 3.0, 1.0])  # A, B, C, D
    assert rec.column("first_token")[:4] == pytest.approx([1.0, 2.0, 3.0, 3.0] + want)
    assert rec.column("last_token")[:4] == pytest.approx([5.0, 3.0, 4.0, 6.0] + want)
    assert rec.column("finish")[:4] == pytest.approx([5.0, 3.0, 4.0, 6.0] + want)
    after = rec.column("second_token") - rec.column("first_token")
    assert after[:4] == pytest.approx(gaps_before[:4])  # inter-token gaps unchanged
    assert math.isnan(rec.column("first_token")[4]) and math.isnan(rec.column("finish")[4])


def _point(concurrency: int) -> dict:
    return {"seed": 0,
            "workload": {"kind": "closed_loop", "recipe": "fixed", "concurrency": concurrency, "isl": 800,
                         "osl": 40, "num_prompts": 4 * concurrency, "warmup": concurrency},
            "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "engine": "vllm"},
            "output": {"dir": None, "requests": False, "timeseries": False}}


@pytest.mark.parametrize("concurrency", [4, 48])
def test_its_ttft_slope_is_the_mean_running_count_and_tpot_does_not_move(concurrency):
    """What calibration relies on: TTFT moves by exactly x × first_token_running of the run
    without it (no re-simulation needed), TPOT not at all."""
    fe = {"tokenize_per_token_s": 1.5e-6, "first_token_overhead_s": 0.0}
    base = simulate_point(_point(concurrency), None, fe)
    moved = simulate_point(_point(concurrency), None, fe | {"stream_per_running_s": 1e-3})
    assert base.first_token_running > (1.0 if concurrency == 4 else 10.0)
    assert moved.ttft_ms - base.ttft_ms == pytest.approx(base.first_token_running * 1e-3 * 1e3, rel=1e-9)
    assert moved.tpot_ms == pytest.approx(base.tpot_ms, rel=1e-12)
