"""Which layers a checkpoint's weight format covers (perf/precision.py ``layer_dtypes``)."""

from __future__ import annotations

import pytest

from servesim.hardware.gpu import load_gpu
from servesim.models.arch import load_model
from servesim.perf.analytic import AnalyticStepTime
from servesim.perf.kernels import OpModel
from servesim.perf.memory import Layout, weight_bytes_by_category
from servesim.perf.precision import fp4_output_projection, layer_dtypes


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
    checkpoint's attention GEMMs take the same time as the bf16 checkpoint's (NVIDIA's first
    DeepSeek export: all of attention excluded)."""
    m, g = load_model("nvidia/DeepSeek-R1-NVFP4"), load_gpu("b200_sxm")
    fp4 = AnalyticStepTime(m, g, tp=8, weight_dtype="fp4", kv_dtype="fp8")
    bf16 = AnalyticStepTime(m, g, tp=8, weight_dtype="bf16", kv_dtype="fp8")
    fp8 = AnalyticStepTime(m, g, tp=8, weight_dtype="fp8", kv_dtype="fp8")
    assert fp4._attn_gemms.time(4) == bf16._attn_gemms.time(4)
    assert fp4._attn_gemms.time(4) != fp8._attn_gemms.time(4)


def test_which_deepseek_nvfp4_checkpoints_keep_o_proj_in_fp4() -> None:
    """NVIDIA's later DeepSeek exports exclude only q_a, q_b, kv_a and kv_b: o_proj is fp4.  The
    upstream names at fp4 on NVIDIA GPUs load R1-0528-FP4-v2 (InferenceX); the first exports, AMD's
    MXFP4 export and the Kimi / GLM exports keep all of attention in bf16."""
    for name in ("nvidia/DeepSeek-R1-0528-FP4-v2", "nvidia/DeepSeek-V3.1-NVFP4", "nvidia/DeepSeek-V3.2-NVFP4"):
        assert fp4_output_projection(name, "fp4") and fp4_output_projection(name, "nvfp4")
    for name in ("deepseek-ai/DeepSeek-R1-0528", "deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3"):
        assert fp4_output_projection(name, "fp4", "nvidia")
        assert not fp4_output_projection(name, "fp4", "amd")
        assert not fp4_output_projection(name, "fp8", "nvidia")
    for name in ("nvidia/DeepSeek-R1-NVFP4", "nvidia/DeepSeek-R1-FP4", "nvidia/DeepSeek-R1-0528-NVFP4",
                 "nvidia/Kimi-K2.5-NVFP4", "moonshotai/Kimi-K2.5", "zai-org/GLM-5"):
        assert not fp4_output_projection(name, "fp4", "nvidia"), name
    dt = layer_dtypes("fp4", "deepseek_v3", is_moe=True, fp4_o_proj=True)
    assert dt["attention_out"] == "fp4" and dt["attention"] == "bf16"
    assert layer_dtypes("fp4", "deepseek_v3", is_moe=True)["attention_out"] == "bf16"
    assert layer_dtypes("fp8", "deepseek_v3", is_moe=True, fp4_o_proj=True)["attention_out"] == "fp8"


def test_fp4_o_proj_is_priced_and_stored_in_fp4() -> None:
    """DeepSeek-V3.1-NVFP4 differs from the first export (same shapes) by exactly its 61 o_proj
    GEMMs run at fp4 instead of bf16, and by their weights stored at 0.5625 bytes instead of 2."""
    g = load_gpu("b200_sxm")
    v1, v31 = load_model("nvidia/DeepSeek-R1-NVFP4"), load_model("nvidia/DeepSeek-V3.1-NVFP4")
    a = AnalyticStepTime(v1, g, tp=8, weight_dtype="fp4", kv_dtype="fp8")
    b = AnalyticStepTime(v31, g, tp=8, weight_dtype="fp4", kv_dtype="fp8")
    ops = OpModel(g, a.p)
    k = v31.num_attention_heads * v31.v_head_dim / 8
    for tokens in (4, 4096):
        want = v31.num_full_layers * (float(ops.gemm(tokens, v31.hidden_size, k, "bf16"))
                                      - float(ops.gemm(tokens, v31.hidden_size, k, "fp4")))
        assert a._attn_gemms.time(tokens) - b._attn_gemms.time(tokens) == pytest.approx(want, rel=1e-9)
    assert a._attn_gemms.time(4096) > b._attn_gemms.time(4096)
    lay = Layout(tp=8)
    saved = (weight_bytes_by_category(v1, "fp4", lay)["attention"]
             - weight_bytes_by_category(v31, "fp4", lay)["attention"])
    assert saved == pytest.approx(v31.num_full_layers * k * v31.hidden_size * (2.0 - 0.5625))
    amd = weight_bytes_by_category(load_model("deepseek-ai/DeepSeek-R1-0528"), "fp4", lay, vendor="amd")
    assert amd["attention"] == weight_bytes_by_category(v1, "fp4", lay)["attention"]
