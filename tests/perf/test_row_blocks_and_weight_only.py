"""gpt-oss's MXFP4 experts on Hopper (triton_kernels' row blocks, TensorRT-LLM's masked
expert-parallel slots) and the engines' weight-only dense GEMMs, against measured kernel times.

Measured values: aiconfigurator-core's per-kernel tables (moe_perf: H200, vLLM's and
TensorRT-LLM's, gpt-oss-120b's experts — hidden 2880, intermediate 2880, top-4 of 128, balanced
routing, one GPU's share; gemm_perf: A100, TensorRT-LLM 1.0.0), read once and written here so
the tests need no optional dependency.
"""

from __future__ import annotations

import numpy as np
import pytest

from servesim.hardware import load_gpu
from servesim.perf.analytic_params import AnalyticParams
from servesim.perf.engine_kernels import NO_RATES, KernelRates, kernel_rates
from servesim.perf.kernels import OpModel
from servesim.perf.moe_row_blocks import ogs_row_block

#: (tokens, ms): vLLM's H200 gpt-oss-120b MXFP4 MoE, one GPU holding every expert.
VLLM_H200_TP1 = ((768, 0.843), (1024, 0.843), (1536, 1.035), (2048, 1.039))
#: (expert-parallel ranks, tokens, ms): TensorRT-LLM's H200 table, each rank handed the whole batch.
TRTLLM_H200_EP = ((1, 16384, 8.609), (2, 16384, 4.851), (4, 16384, 2.984), (8, 16384, 2.051),
                  (8, 4096, 0.565))


def _gpt_oss_moe_ms(engine: str, tokens: int, ep: int = 1, rates=None) -> float:
    gpu = load_gpu("h200_sxm")
    ops = OpModel(gpu, AnalyticParams(), kernel_rates(engine, gpu) if rates is None else rates)
    # the tables' rows: balanced routing (every local expert touched), every rank handed the
    # whole batch with its remote experts' slots masked
    return float(ops.moe(tokens, 2880, 2880, 4, 128, 1, ep, "mxfp4", touched=128 / ep, slots=tokens * 4,
                         act_dtype="bf16")) * 1e3


def test_ogs_row_block_rounds_an_experts_expected_rows_up_to_a_power_of_two() -> None:
    assert ogs_row_block([0.5, 1, 16, 17, 24, 32, 33, 64, 96, 128, 500]).tolist() == \
        [16, 16, 16, 32, 32, 32, 64, 64, 128, 128, 128]


def test_only_hopper_mxfp4_on_the_triton_path_takes_ogs_row_blocks() -> None:
    h200, b200 = load_gpu("h200_sxm"), load_gpu("b200_sxm")
    for engine in ("vllm", "trtllm"):
        assert kernel_rates(engine, h200).moe_ogs("mxfp4")
        assert not kernel_rates(engine, b200).moe_ogs("mxfp4")
    rates = kernel_rates("vllm", h200)
    assert not rates.moe_ogs("mxfp4", "marlin") and not rates.moe_ogs("bf16") and not NO_RATES.moe_ogs("mxfp4")
    assert not kernel_rates("sglang", h200).moe_ogs("mxfp4")  # its table: the generic fused Triton MoE


def test_vllm_hopper_gpt_oss_moe_steps_with_triton_kernels_row_blocks() -> None:
    """768 and 1,024 tokens (24 and 32 rows an expert: one 32-row block) take the same time,
    1,536 and 2,048 (one 64-row block) 1.23x that; the fused kernels' 16/64-row tile priced
    1,024 and 1,536 alike.  (vLLM's four rates, fitted on every layout and token count of its
    table, price these one-GPU rows 20-25% fast.)"""
    ms = {t: _gpt_oss_moe_ms("vllm", t) for t, _ in VLLM_H200_TP1}
    for tokens, measured in VLLM_H200_TP1:
        assert ms[tokens] == pytest.approx(measured, rel=0.3)
    assert ms[768] == pytest.approx(ms[1024], rel=0.05) and ms[1536] == pytest.approx(ms[2048], rel=0.05)
    assert ms[1536] / ms[1024] > 1.15
    tiled = KernelRates(kernel_rates("vllm", load_gpu("h200_sxm")).rates)
    assert _gpt_oss_moe_ms("vllm", 1536, rates=tiled) / _gpt_oss_moe_ms("vllm", 1024, rates=tiled) < 1.15


def test_trtllm_hopper_expert_parallel_mxfp4_pays_for_its_masked_slots() -> None:
    """TensorRT-LLM's Hopper gpt-oss kernel (its TRITON backend) handed the whole batch under expert
    parallelism: 8 ranks take 2.04 ms at 16k tokens where an eighth of one rank's 8.56 would be
    1.07.  Each masked slot costs ~15 ns at every rank count; priced within 25% at each."""
    for ep, tokens, measured in TRTLLM_H200_EP:
        assert _gpt_oss_moe_ms("trtllm", tokens, ep) == pytest.approx(measured, rel=0.25)
    no_masked = KernelRates({k: v for k, v in kernel_rates("trtllm", load_gpu("h200_sxm")).rates.items()
                             if k[0] != "moe_masked"}, mxfp4_ogs=True)
    assert _gpt_oss_moe_ms("trtllm", 16384, 8, no_masked) < 0.75 * 2.039


def test_weight_only_gemm_rates_apply_to_weight_only_formats_alone() -> None:
    gpu = load_gpu("h100_sxm")
    rates = KernelRates({("gemm_wo", "int4"): 0.5, ("gemm_wo_fixed", "int4"): 5.0})
    base, slow = OpModel(gpu, AnalyticParams()), OpModel(gpu, AnalyticParams(), rates)
    m = np.array([1, 8192])
    small, large = slow.gemm(m, 4096, 4096, "int4") - base.gemm(m, 4096, 4096, "int4")
    assert small == pytest.approx(4.0 * gpu.kernel_latency_us * 1e-6)  # four more kernel latencies
    assert large > 0.8 * float(base.gemm(8192, 4096, 4096, "int4"))  # half the math rate
    assert np.array_equal(slow.gemm(m, 4096, 4096, "bf16"), base.gemm(m, 4096, 4096, "bf16"))
    assert np.array_equal(slow.gemm(m, 4096, 4096, "fp8"), base.gemm(m, 4096, 4096, "fp8"))


def test_trtllm_ampere_int4_weight_only_gemm_pays_its_fixed_cost() -> None:
    """TensorRT-LLM's A100 int4 weight-only GEMM (4096 x 4096 weights) takes 20.5 us for one row,
    where its 8 MB of weights stream in ~7 us: the op's fixed cost is about five kernel latencies
    (its bf16 GEMM's smallest shapes take one).  The op model alone read it at under 0.6 of that;
    at 8,192 rows it runs at the bf16 math rate (1.09 ms; bf16 1.04)."""
    gpu = load_gpu("a100_80gb")
    ops = OpModel(gpu, AnalyticParams(), kernel_rates("trtllm", gpu))
    assert float(ops.gemm(1, 4096, 4096, "int4")) * 1e6 == pytest.approx(20.5, rel=0.2)
    assert float(ops.gemm(8192, 4096, 4096, "int4")) * 1e3 == pytest.approx(1.09, rel=0.15)
    assert float(OpModel(gpu, AnalyticParams()).gemm(1, 4096, 4096, "int4")) * 1e6 < 0.6 * 20.5
