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
    # request: A      B    C    D (other worker)  E (no token)
    return _Recorder(first=[1.0, 2.0, 3.0, 3.0, np.nan], last=[5.0, 3.0, 4.0, 6.0, np.nan],
                     worker=[0, 0, 0, 1, 0])


def test_running_counts_the_requests_decoding_through_the_first_token_on_the_same_worker():
    n = running_at_first_token(_hand_built())
    # A: alone; B: A decodes; C: A and B (B's last token comes out in that very pass); D: alone on
    # worker 1 although A, B, C are busy on worker 0; E never got a token
    assert n[:4].tolist() == [1.0, 2.0, 3.0, 1.0]
    assert math.isnan(n[4])


def test_stream_latency_moves_a_requests_tokens_together():
    rec = _hand_built()
    gaps_before = rec.column("second_token") - rec.column("first_token")
    fe = Frontend(FrontendParams(first_token_overhead_s=0.01, stream_per_running_s=0.002))
    fe.apply_stream_latency(rec)
    want = 0.01 + 0.002 * np.array([1.0, 2.0, 3.0, 1.0])
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
