"""Which layers a checkpoint's weight format covers (perf/precision.py ``layer_dtypes``)."""

from __future__ import annotations

from servesim.hardware.gpu import load_gpu
from servesim.models.arch import load_model
from servesim.perf.analytic import AnalyticStepTime
from servesim.perf.precision import layer_dtypes


def test_nvfp4_moe_checkpoints_keep_attention_in_bf16() -> None:
    """ModelOpt's NVFP4 MoE exports exclude every self_attn module: attention stays bf16, every
    MLP (routed, shared, dense layers) is fp4."""
    dt = layer_dtypes("fp4", "deepseek_v3", is_moe=True)
    assert dt["attention"] == "bf16" and dt["linear_attention"] == "bf16"
    assert dt["routed_experts"] == "fp4" and dt["shared_experts"] == "fp4" and dt["dense_mlp"] == "fp4"


def test_dense_fp4_and_fp8_quantize_every_linear_layer() -> None:
    for w in ("fp4", "fp8"):
        dt = layer_dtypes(w, "llama", is_moe=False)
        assert dt["attention"] == w and dt["dense_mlp"] == w
    assert layer_dtypes("fp8", "deepseek_v3", is_moe=True)["attention"] == "fp8"


def test_weight_only_formats_keep_everything_but_the_experts_in_bf16() -> None:
    for w in ("mxfp4", "int4"):
        dt = layer_dtypes(w, "gpt_oss", is_moe=True)
        assert dt["attention"] == dt["shared_experts"] == "bf16" and dt["routed_experts"] == w


def test_nvfp4_moe_attention_priced_as_bf16_weights() -> None:
    """A small decode batch's attention projections cost what bf16 weights cost: an fp4 MoE
    checkpoint's attention GEMMs take the same time as the bf16 checkpoint's."""
    m, g = load_model("deepseek-ai/DeepSeek-V3"), load_gpu("b200_sxm")
    fp4 = AnalyticStepTime(m, g, tp=8, weight_dtype="fp4", kv_dtype="fp8")
    bf16 = AnalyticStepTime(m, g, tp=8, weight_dtype="bf16", kv_dtype="fp8")
    fp8 = AnalyticStepTime(m, g, tp=8, weight_dtype="fp8", kv_dtype="fp8")
    assert fp4._attn_gemms.time(4) == bf16._attn_gemms.time(4)
    assert fp4._attn_gemms.time(4) != fp8._attn_gemms.time(4)
