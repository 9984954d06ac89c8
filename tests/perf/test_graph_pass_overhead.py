"""The time of a CUDA-graph decode pass beyond its layers is the engine's (its plan's), unless a
calibration or ``perf.params`` sets it: TensorRT-LLM's executor leaves ~50 us, vLLM and SGLang
keep the op model's 0.5 ms."""

from __future__ import annotations

import numpy as np
import pytest

from servesim.cluster.deployment import build_deployment
from servesim.config.load import load_config
from servesim.engines.trtllm.planner import TRTLLM_GRAPH_PASS_S
from servesim.perf.analytic import AnalyticStepTime
from servesim.perf.analytic_params import AnalyticParams
from servesim.perf.plan import PassPlan

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
DECODE = PassPlan(decode_ctx=np.full(8, 2048))


def _step_time(engine: str, perf: dict | None = None) -> AnalyticStepTime:
    cfg = {"workload": {"kind": "synthetic", "num_requests": 4, "arrival": {"process": "poisson", "rate": 1.0},
                        "input": {"dist": "fixed", "value": 100}, "output": {"dist": "fixed", "value": 10}},
           "deployment": {"model": MODEL, "gpu": "h100", "engine": {"name": engine}},
           "output": {"dir": None}}
    if perf is not None:
        cfg["perf"] = perf
    st = build_deployment(load_config(cfg)).step_time
    while not isinstance(st, AnalyticStepTime):
        st = st.inner
    return st


@pytest.mark.parametrize("engine, expected", [("trtllm", TRTLLM_GRAPH_PASS_S),
                                              ("vllm", AnalyticParams().graph_pass_overhead_s),
                                              ("sglang", AnalyticParams().graph_pass_overhead_s)])
def test_each_engine_prices_its_own_graph_pass_overhead(engine, expected):
    st = _step_time(engine, {"model": "analytic", "calibration": None})
    assert st.p.graph_pass_overhead_s == pytest.approx(expected)
    assert 0 < TRTLLM_GRAPH_PASS_S < AnalyticParams().graph_pass_overhead_s


def test_trtllm_decode_pass_is_cheaper_by_the_difference_and_prefill_is_unchanged():
    """Only CUDA-graph decode passes carry it: the same pass on TensorRT-LLM's plan costs the
    difference less, a prefill pass (eager) the same."""
    trt = _step_time("trtllm", {"model": "analytic", "calibration": None})
    plain = AnalyticStepTime(trt.model, trt.gpu, kernel_rates=trt.kernel_rates)  # the op model's default
    gap = AnalyticParams().graph_pass_overhead_s - TRTLLM_GRAPH_PASS_S
    assert plain.pass_time(DECODE) - trt.pass_time(DECODE) == pytest.approx(gap, rel=1e-9)
    prefill = PassPlan(prefill_new=np.array([1024]), prefill_cached=np.array([0]))
    assert trt.pass_time(prefill) == pytest.approx(plain.pass_time(prefill), rel=1e-12)


def test_perf_params_override_the_engines_value():
    st = _step_time("trtllm", {"model": "analytic", "calibration": None,
                               "params": {"graph_pass_overhead_s": 0.3e-3}})
    assert st.p.graph_pass_overhead_s == pytest.approx(0.3e-3)
