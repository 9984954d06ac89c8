"""Every analytic parameter moves some pass's price: none exists only in the schema.

A parameter nobody reads looks calibratable and does nothing (``host_link_gbs`` once sat
here while the engines priced host loads from their own option).  Each field is moved away
from its default on deployments and passes chosen to exercise it (dense and MoE layers,
tensor and expert parallelism, linear attention, prefill chunks, small CUDA-graph and large
eager decode batches); at least one pass time must change.
"""

from __future__ import annotations

import numpy as np
import pytest

from servesim.hardware.gpu import load_gpu
from servesim.models.arch import load_model
from servesim.perf.analytic import AnalyticStepTime
from servesim.perf.analytic_params import AnalyticParams
from servesim.perf.plan import PassPlan

DEPLOYMENTS = (  # (model, gpu, tp, ep, attention dp, weight dtype, eager launch, all-to-all dispatch)
    ("meta-llama/Llama-3.1-70B", "h100", 2, 1, 1, "fp8", False, False),
    ("Qwen/Qwen3-30B-A3B", "h200", 2, 2, 1, "bf16", True, False),  # as SGLang / TensorRT-LLM run it
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", "b200", 1, 1, 1, "bf16", False, False),
    ("deepseek-ai/DeepSeek-V3", "h200", 1, 8, 8, "fp8", False, True),  # MLA decode, all-to-all dispatch
)

PLANS = (
    PassPlan(prefill_new=np.array([2048, 300]), prefill_cached=np.array([0, 4096])),
    PassPlan(prefill_new=np.array([16384]), prefill_cached=np.array([0])),  # experts compute bound
    PassPlan(decode_ctx=np.full(8, 3000)),  # small: replayed from a CUDA graph
    PassPlan(decode_ctx=np.full(256, 1500)),  # a graph batch by default, eager below 256
    PassPlan(decode_ctx=np.full(600, 1200)),  # beyond the default graph sizes: eager
    PassPlan(prefill_new=np.array([512]), prefill_cached=np.array([0]), decode_ctx=np.full(64, 2000)),
)


def _times(params: AnalyticParams) -> list[float]:
    out = []
    for model, gpu, tp, ep, dp, wdt, eager, a2a in DEPLOYMENTS:
        st = AnalyticStepTime(load_model(model), load_gpu(gpu), tp=tp, ep=ep, weight_dtype=wdt, params=params,
                              attention_dp=dp, eager_launch=eager, moe_all_to_all=a2a)
        out.extend(st.pass_time(plan) for plan in PLANS)
    return out


def _moved(name: str, value):
    """A different, valid value: scaled for floats, shifted for integers, a small cost for zeros."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return max(1, value // 4) if value > 4 else value + 3
    if value == 0:
        return 1e-3
    return value * 0.5 if value > 1e-3 else value * 3


@pytest.mark.parametrize("name", sorted(AnalyticParams.model_fields))
def test_parameter_changes_some_pass_time(name):
    base = AnalyticParams()
    moved = base.model_copy(update={name: _moved(name, getattr(base, name))})
    assert _times(moved) != _times(base), f"perf.params.{name} changes no pass time"
