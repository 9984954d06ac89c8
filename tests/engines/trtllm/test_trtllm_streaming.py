"""TensorRT-LLM's ``stream_interval``: without postprocess workers the client's first chunk comes
with the request's ``stream_interval``-th decoding iteration (engines/streaming.py)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from servesim.api import predict
from servesim.cluster.routers import RoundRobinRouter
from servesim.cluster.worker import Worker
from servesim.engines.base import EngineLimits
from servesim.engines.streaming import delay_first_chunk
from servesim.engines.trtllm.options import TRTLLMOptions
from servesim.engines.trtllm.scheduler import TRTLLMEngine
from servesim.metrics.recorder import RequestRecorder
from servesim.perf.simple import FixedStepTime
from servesim.sim.simulation import Simulation
from servesim.workload.request import Request

STEP = 0.01


def _run(outputs: list[int]) -> RequestRecorder:
    """Requests of a 10-token prompt arriving together, each iteration STEP seconds."""
    rec = RequestRecorder()
    eng = TRTLLMEngine(0, rec, EngineLimits(kv_capacity_tokens=100_000, context_length=4096),
                       TRTLLMOptions(tokens_per_block=16))
    reqs = [Request(index=i, request_id=f"r{i}", arrival=0.0, input_length=10, output_length=n,
                    hash_ids=(i + 1,), block_size=16) for i, n in enumerate(outputs)]
    Simulation(iter(reqs), "open", None, [Worker(0, eng, FixedStepTime(STEP), 1)], RoundRobinRouter(), rec).run()
    return rec


def test_first_chunk_waits_the_interval_and_the_last_token_stays():
    rec = _run([20, 5, 1])
    first0 = rec.column("first_token").copy()
    last0 = rec.column("last_token").copy()
    assert first0[0] == pytest.approx(STEP) and last0[0] == pytest.approx(20 * STEP)
    delay_first_chunk(rec, 9)
    first, second, last = rec.column("first_token"), rec.column("second_token"), rec.column("last_token")
    # the 20-token request: first chunk at its 10th iteration; tokens 1..10 arrive together
    assert first[0] == pytest.approx(10 * STEP) and second[0] == pytest.approx(10 * STEP)
    # a 5-token request finishes before its 10th iteration: everything arrives with its last token
    assert first[1] == pytest.approx(last0[1])
    # a one-token request has no decoding iteration to wait for
    assert first[2] == pytest.approx(first0[2])
    np.testing.assert_array_equal(last, last0)  # end to end unchanged
    # the benchmark's TPOT, (E2E - TTFT) / (output - 1), falls accordingly
    assert (last[0] - first[0]) / 19 == pytest.approx(10 * STEP / 19)


def test_no_delay_is_a_no_op():
    rec = _run([20])
    before = rec.column("first_token").copy()
    delay_first_chunk(rec, 0)
    np.testing.assert_array_equal(rec.column("first_token"), before)


BASE = {
    "seed": 0,
    "workload": {"kind": "synthetic", "num_requests": 120, "arrival": {"process": "poisson", "rate": 3.0},
                 "input": {"dist": "lognormal", "median": 800, "sigma": 0.5, "max": 4000},
                 "output": {"dist": "lognormal", "median": 200, "sigma": 0.3, "max": 800}},
    "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "workers": 1,
                   "engine": {"name": "trtllm"}},
    "output": {"dir": None},
}


def _summary(**engine):
    c = copy.deepcopy(BASE)
    c["deployment"]["engine"].update(engine)
    return predict(c).summary["latency"]


def test_a_run_with_stream_interval_reports_ttft_later_by_the_iterations():
    plain = _summary()
    chunked = _summary(stream_interval=10)
    workers = _summary(stream_interval=10, num_postprocess_workers=4)
    tpot = plain["tpot_ms"]["mean"]
    shift = chunked["ttft_ms"]["mean"] - plain["ttft_ms"]["mean"]
    # nine of each request's decoding iterations (a TPOT each, a little above it early in a burst)
    assert 7 * tpot < shift < 12 * tpot
    assert chunked["tpot_ms"]["mean"] < plain["tpot_ms"]["mean"]
    assert workers["ttft_ms"]["mean"] == plain["ttft_ms"]["mean"]
    assert workers["tpot_ms"]["mean"] == plain["tpot_ms"]["mean"]
