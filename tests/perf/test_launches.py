"""The host time of eager passes: operation counts per layer and where the engines pay it."""

from __future__ import annotations

import numpy as np
import pytest

from servesim.engines.planning import PlanInputs
from servesim.engines.registry import plan_engine
from servesim.engines.sglang.options import SGLangOptions
from servesim.engines.trtllm.options import TRTLLMOptions
from servesim.engines.vllm.options import VLLMOptions
from servesim.hardware.gpu import load_gpu
from servesim.models.arch import load_model
from servesim.perf.analytic import AnalyticStepTime
from servesim.perf.analytic_params import AnalyticParams
from servesim.perf.launches import eager_ops_per_layer
from servesim.perf.memory import Layout
from servesim.perf.plan import PassPlan


def test_operation_counts_follow_the_layer_parts():
    """Llama: attention 5 + MLP 4 (+ 2 all-reduces with TP); DeepSeek-V3: 3 dense MLA layers
    (5 + 6 + 4 + 2) and 58 MoE layers with a shared expert (5 + 6 + 9 + 3 + 2)."""
    llama = load_model("meta-llama/Llama-3.1-8B-Instruct")
    assert eager_ops_per_layer(llama, 1) == 9
    assert eager_ops_per_layer(llama, 2) == 11
    ds = load_model("deepseek-ai/DeepSeek-V3")
    assert eager_ops_per_layer(ds, 8) == pytest.approx((3 * 17 + 58 * 25) / 61)


def test_eager_op_time_reproduces_the_measured_deepseek_gap():
    """eager_op_s is set from sglang PR #12160: DeepSeek-V3's eager forward of one new token
    took 59.5 ms more than its piecewise-graph replay (82.6 against 23.1 ms)."""
    ds = load_model("deepseek-ai/DeepSeek-V3")
    gap = ds.num_layers * eager_ops_per_layer(ds, 8) * AnalyticParams().eager_op_s
    assert gap == pytest.approx(59.5e-3, rel=0.03)


@pytest.mark.parametrize("model", ["meta-llama/Llama-3.1-8B-Instruct", "deepseek-ai/DeepSeek-V3"])
def test_eager_launch_prices_prefill_passes_not_graph_decodes(model):
    arch, gpu = load_model(model), load_gpu("h200")
    kw = dict(tp=8, weight_dtype="fp8")
    compiled = AnalyticStepTime(arch, gpu, **kw)
    eager = AnalyticStepTime(arch, gpu, eager_launch=True, **kw)
    prefill = PassPlan(prefill_new=np.array([1024]), prefill_cached=np.array([0]))
    decode = PassPlan(decode_ctx=np.full(8, 2000))
    host = arch.num_layers * eager_ops_per_layer(arch, 8) * AnalyticParams().eager_op_s
    assert eager.pass_time(prefill) - compiled.pass_time(prefill) == pytest.approx(host, rel=1e-9)
    assert eager.pass_time(decode) == compiled.pass_time(decode)


@pytest.mark.parametrize("options, eager", [
    (SGLangOptions(), True), (SGLangOptions(enable_piecewise_cuda_graph=True), False),
    (TRTLLMOptions(), False),
    (VLLMOptions(), False)])
def test_engine_plans_say_whether_they_launch_eagerly(options, eager):
    facts = PlanInputs(load_model("meta-llama/Llama-3.1-8B-Instruct"), load_gpu("h100"), Layout(tp=1),
                       "bf16", "bf16")
    assert plan_engine(options, facts).eager_launch is eager
