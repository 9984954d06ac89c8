"""Each engine's own kernel rates (perf/engine_kernels.py) and where the step-time model applies them."""

from __future__ import annotations

import numpy as np
import pytest

from servesim.errors import ConfigError
from servesim.hardware.gpu import load_gpu
from servesim.models.arch import load_model
from servesim.perf import engine_kernels
from servesim.perf.analytic import AnalyticStepTime
from servesim.perf.config import build_step_time
from servesim.perf.engine_kernels import NO_RATES, OPS, KernelRates, kernel_rates, rate_range
from servesim.perf.precision import weight_bytes
from servesim.perf.kernels import MOE_KERNELS, OpModel
from servesim.perf.analytic_params import AnalyticParams
from servesim.perf.plan import PassPlan

DEEPSEEK = "deepseek-ai/DeepSeek-R1-0528"


def test_shipped_rates_are_in_range_and_name_known_engines_ops_and_formats() -> None:
    table = engine_kernels._table()
    assert table, "engine_kernels.yaml lists no rate"
    for (engine, major), rates in table.items():
        assert engine in ("sglang", "vllm", "trtllm") and major in (8, 9, 10)
        # Ampere's tables time weight-only GEMMs alone (TensorRT-LLM's A100 table)
        assert major != 8 or {op for op, _ in rates} <= {"gemm_wo", "gemm_wo_fixed"}
        for (op, fmt), rate in rates.items():
            lo, hi = rate_range(op)
            base, _, path = fmt.partition("@")  # a fused-MoE kernel path's own rates: <format>@<path>
            assert base in OPS[op] and lo <= rate <= hi
            assert not path or (op.startswith("moe") and path in engine_kernels.MOE_KERNEL_PATHS)


def test_sglang_prefills_mla_on_hopper_slower_than_tensorrt_llm() -> None:
    """SGLang's FA3 MLA prefill on H100/H200 measures well below the op model; TensorRT-LLM's
    own MLA kernel sits near it (their kernel tables)."""
    h200 = load_gpu("h200_sxm")
    assert kernel_rates("sglang", h200).prefill_attention("mla") < 0.6
    assert kernel_rates("trtllm", h200).prefill_attention("mla") > 0.8


def test_other_vendors_and_unmeasured_engines_keep_the_op_model() -> None:
    assert kernel_rates("sglang", load_gpu("mi300x")) is NO_RATES
    assert kernel_rates("atom", load_gpu("mi355x")) is NO_RATES
    assert kernel_rates("no-such-engine", load_gpu("h100_sxm")) is NO_RATES
    assert NO_RATES.moe("fp8") == NO_RATES.prefill_attention("gqa") == 1.0


def test_a_rate_slows_exactly_the_ops_it_names() -> None:
    gpu, p = load_gpu("h200_sxm"), AnalyticParams()
    base, slow = OpModel(gpu, p), OpModel(gpu, p, KernelRates({("moe", "fp8"): 0.5}))
    big = 8192  # compute-bound: the rate shows in full
    args = (big, 7168, 2048, 8, 256, 8, 1, "fp8")
    assert float(slow.moe(*args)) > 1.5 * float(base.moe(*args))
    assert float(slow.moe(big, 7168, 2048, 8, 256, 8, 1, "bf16")) == float(base.moe(big, 7168, 2048, 8, 256, 8, 1, "bf16"))
    assert float(slow.attention_prefill(1, 4096, 0, 32, 8, 128)) == float(base.attention_prefill(1, 4096, 0, 32, 8, 128))


def test_a_stream_rate_moves_decode_sized_moe_and_not_prefill_sized() -> None:
    """A MoE kernel's streaming rate prices the expert weights a small batch reads; a prefill-sized
    batch is bound by its math and keeps its time."""
    gpu = load_gpu("b200_sxm")  # nvfp4 weights streamed at 0.6 of bf16's: a 1.5 rate stays under the HBM ceiling
    gpu, p = gpu.model_copy(update={"achievable": dict(gpu.achievable) | {"stream_nvfp4": 0.6}}), AnalyticParams()
    base, fast = OpModel(gpu, p), OpModel(gpu, p, KernelRates({("moe_stream", "fp4"): 1.5}))
    small = (8, 7168, 2048, 8, 384, 4, 1, "nvfp4")
    big = (16384, 7168, 2048, 8, 384, 4, 1, "nvfp4")
    assert float(fast.moe(*small)) < 0.85 * float(base.moe(*small))
    assert float(fast.moe(*big)) == pytest.approx(float(base.moe(*big)), rel=1e-9)


def test_a_fixed_cost_rate_adds_kernel_latencies_at_every_size() -> None:
    """A MoE kernel's fixed-cost rate scales its kernel count (``MOE_KERNELS``): the same extra
    time for one token as for a prefill, and nothing else moves."""
    gpu, p = load_gpu("h200_sxm"), AnalyticParams()
    base, heavy = OpModel(gpu, p), OpModel(gpu, p, KernelRates({("moe_fixed", "mxfp4"): 3.0}))
    extra = 2.0 * MOE_KERNELS * gpu.kernel_latency_us * 1e-6
    for tokens in (1, 4, 64, 8192):
        args = (tokens, 2880, 2880, 4, 128, 1, 8, "mxfp4")
        assert float(heavy.moe(*args)) - float(base.moe(*args)) == pytest.approx(extra, rel=1e-9)
    assert float(heavy.moe(4, 2880, 2880, 4, 128, 1, 8, "bf16")) == float(base.moe(4, 2880, 2880, 4, 128, 1, 8, "bf16"))


#: One token through vLLM 0.24.0's block-fp8 MoE (Triton) on H200, experts split over 8 GPUs,
#: as (hidden, intermediate, experts, top-k, measured ms) of aiconfigurator-core 0.12's table
#: (DeepSeek's, Kimi's, Qwen3.5's and Kimi-K2-Thinking-like shapes): a handful of experts'
#: slices to read, yet 40-63 us, the routing, sorting and permutation kernels and launches.
VLLM_FP8_MOE_ONE_TOKEN_H200 = ((7168, 2048, 256, 8, 0.0552), (7168, 2048, 384, 8, 0.0593),
                               (4096, 1024, 512, 10, 0.0408), (7168, 3072, 384, 6, 0.0634))


@pytest.mark.parametrize("hidden,inter,experts,topk,measured_ms", VLLM_FP8_MOE_ONE_TOKEN_H200)
def test_a_handful_of_tokens_pays_the_engines_moe_fixed_cost(hidden, inter, experts, topk, measured_ms) -> None:
    gpu = load_gpu("h200_sxm")
    args = (1, hidden, inter, topk, experts, 8, 1, "fp8")
    plain = float(OpModel(gpu, AnalyticParams()).moe(*args, touched=topk)) * 1e3
    rated = float(OpModel(gpu, AnalyticParams(), kernel_rates("vllm", gpu)).moe(*args, touched=topk)) * 1e3
    assert kernel_rates("vllm", gpu).moe_fixed("fp8") > 1.5
    # without the engine's fixed cost the op model reads 56-70% of the table (the touched experts'
    # slices streamed on their column tiles' SMs, kernels.MOE_SM_STREAM_BPS, are part of it)
    assert plain < 0.75 * measured_ms
    assert rated == pytest.approx(measured_ms, rel=0.25)


def test_a_stream_rate_never_streams_past_the_gpus_hbm_ceiling() -> None:
    """With mem_eff 0.85 under H100's measured ceiling 0.89, a faster kernel may gain up to
    0.89 / 0.85 of the weight-streaming time and no more."""
    gpu, p = load_gpu("h100_sxm"), AnalyticParams()
    assert p.mem_eff < gpu.ceiling("hbm")
    small = (8, 4096, 1536, 8, 128, 1, 1, "bf16")
    base = float(OpModel(gpu, p).moe(*small))
    twice = float(OpModel(gpu, p, KernelRates({("moe_stream", "bf16"): 2.0})).moe(*small))
    thrice = float(OpModel(gpu, p, KernelRates({("moe_stream", "bf16"): 3.0})).moe(*small))
    assert twice == thrice < base


def test_build_step_time_prices_sglangs_mla_prefill_with_its_rate() -> None:
    """An 8k-token DeepSeek prefill on H200: the step-time model SGLang gets spends more on
    attention than one without engine rates (but its thread blocks' fixed work), by the MLA
    rate's share of the attention's math (the new tokens' own traffic is no kernel's math: the
    same in both)."""
    arch, gpu = load_model(DEEPSEEK), load_gpu("h200_sxm")
    perf = {"model": "analytic", "calibration": None}
    sg = build_step_time(perf, arch, gpu, tp=8, weight_dtype="fp8", kv_dtype="fp8", engine="sglang")
    rates = kernel_rates("sglang", gpu)
    rate = rates.prefill_attention("mla")
    # "plain": no engine rates but the same thread-block fixed work (its own fitted factor)
    fixed = KernelRates({("prefill_attention_fixed", "mla"): rates.prefill_attention_fixed("mla")})
    plain = AnalyticStepTime(arch, gpu, tp=8, weight_dtype="fp8", kv_dtype="fp8", params=sg.p, kernel_rates=fixed)
    attn_sg, attn_plain = sg._prefill_attn([8192], [0]), plain._prefill_attn([8192], [0])
    exposed = 8192 * sg._pre_tok  # the new tokens' own traffic, not the kernel's math
    assert exposed == 8192 * plain._pre_tok > 0
    assert attn_sg - exposed == pytest.approx((attn_plain - exposed) / rate, rel=0.02)
    # the pass prices its chunk's attention so: the two passes differ by the attention's
    # difference plus the same other-op difference (SGLang's MoE and GEMM rates) at any prefix
    rest = []
    for cached in (0, 8192):
        plan = PassPlan(prefill_new=np.array([8192]), prefill_cached=np.array([cached]))
        rest.append(sg.pass_time(plan) - plain.pass_time(plan)
                    - (sg._prefill_attn([8192], [cached]) - plain._prefill_attn([8192], [cached])))
    assert rest[0] == pytest.approx(rest[1], rel=1e-6, abs=1e-9)
    assert sg.pass_time(plan) > plain.pass_time(plan)  # after an 8k prefix the attention decides


def test_a_bad_rates_file_names_the_entry(tmp_path, monkeypatch) -> None:
    bad = tmp_path / "engine_kernels.yaml"
    bad.write_text("rates:\n  - {engine: vllm, cuda_major: 9, op: moe, format: fp8, rate: 12}\n")
    monkeypatch.setattr(engine_kernels, "RATES_FILE", bad)
    engine_kernels._table.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"engine_kernels.yaml: rates\[0\]: rate 12"):
            engine_kernels._table()
        bad.write_text("rates:\n  - {engine: vllm, cuda_major: 9, op: moe, format: fp6, rate: 1}\n")
        engine_kernels._table.cache_clear()
        with pytest.raises(ConfigError, match="format 'fp6'"):
            engine_kernels._table()
    finally:
        engine_kernels._table.cache_clear()


#: gpt-oss-120b's routed experts (hidden 2880, intermediate 2880, 128 experts, top-4) on one GPU,
#: one tensor-parallel rank per GPU, balanced routing, as (GPU, engine, tokens, tp, measured ms) of
#: aiconfigurator-core 0.12's MoE tables: vLLM 0.24.0's gpt-oss MXFP4 MoE on H200 (OpenAI Triton
#: kernels), TensorRT-LLM 1.3.0rc20's W4A16 MXFP4 MoE on H200 and its MXFP4 x MXFP8 MoE on B200
#: (the kernel vLLM runs on Blackwell through FlashInfer).
GPT_OSS_MOE_MEASURED = (
    ("h200_sxm", "vllm", 8192, 1, 2.905), ("h200_sxm", "vllm", 8192, 4, 0.923),
    ("h200_sxm", "vllm", 64, 1, 0.665), ("h200_sxm", "vllm", 64, 4, 0.191),
    ("h200_sxm", "trtllm", 8192, 1, 4.302), ("h200_sxm", "trtllm", 64, 1, 0.621),
    ("b200_sxm", "trtllm", 8192, 1, 0.884), ("b200_sxm", "trtllm", 64, 1, 0.275),
    ("b200_sxm", "vllm", 8192, 1, 0.884),
)


@pytest.mark.parametrize("gpu_name,engine,tokens,tp,measured_ms", GPT_OSS_MOE_MEASURED)
def test_gpt_oss_mxfp4_moe_is_priced_at_the_engines_own_kernels(gpu_name, engine, tokens, tp, measured_ms) -> None:
    """The engines' MXFP4 kernels run gpt-oss's prefill-sized MoE 1.7-2.7x faster than the op
    model's generic grouped GEMM (``moe_eff_scale`` of the dense efficiency) and its decode-sized
    MoE up to 1.3x slower (Hopper W4A16 kernels stream MXFP4 experts at about half the HBM
    bandwidth); with the engine's mxfp4 rates each case is within 30% of the table."""
    gpu = load_gpu(gpu_name)
    args = (tokens, 2880, 2880, 4, 128, tp, 1, "mxfp4")
    touched = min(128, 4 * tokens)
    ms = float(OpModel(gpu, AnalyticParams(), kernel_rates(engine, gpu)).moe(*args, touched=touched)) * 1e3
    assert ms == pytest.approx(measured_ms, rel=0.3)


def test_gpt_oss_moe_prefill_without_the_engines_mxfp4_rate_was_far_too_slow() -> None:
    """What the rates correct: the op model alone prices an 8k-token gpt-oss MoE on H200 at 2.7x
    vLLM's measured kernel and 1.7x TensorRT-LLM's on B200."""
    for gpu_name, engine, tokens, tp, measured_ms in GPT_OSS_MOE_MEASURED:
        if tokens == 8192 and tp == 1:
            gpu = load_gpu(gpu_name)
            plain = float(OpModel(gpu, AnalyticParams()).moe(tokens, 2880, 2880, 4, 128, tp, 1, "mxfp4")) * 1e3
            assert plain > 1.6 * measured_ms


def test_gpt_oss_fp4_checkpoint_gets_the_mxfp4_rates_and_nvfp4_models_do_not() -> None:
    """gpt-oss's ``fp4`` is MXFP4 (perf/precision.py): its 8k prefill on H200 under vLLM prices
    the routed experts with vLLM's mxfp4 math rate; an NVFP4 MoE on B200 keeps its own (fp4) rate."""
    arch, gpu = load_model("openai/gpt-oss-120b"), load_gpu("h200_sxm")
    perf = {"model": "analytic", "calibration": None}
    vl = build_step_time(perf, arch, gpu, tp=1, weight_dtype="fp4", kv_dtype="bf16", engine="vllm")
    plain = AnalyticStepTime(arch, gpu, tp=1, weight_dtype="fp4", kv_dtype="bf16", params=vl.p)
    rate = kernel_rates("vllm", gpu).moe("mxfp4")
    assert rate > 1.5
    assert vl._moe_time(8192) == pytest.approx(plain._moe_time(8192) / rate, rel=0.05)
    b200 = load_gpu("b200_sxm")
    assert kernel_rates("vllm", b200).moe("nvfp4") == kernel_rates("vllm", b200).moe("fp4") != \
        kernel_rates("vllm", b200).moe("mxfp4")


#: Kimi-K2.5's routed experts (hidden 7168, intermediate 2048, 384 experts, top-8, int4 weights)
#: tensor-parallel over one node's 8 GPUs, as the launch scripts serve them, balanced routing:
#: (GPU, tokens, measured ms) of vLLM 0.24.0's int4 MoE table in aiconfigurator-core 0.12
#: (kernel source: compressed-tensors W4A16 through Marlin, the kernel vLLM serves Kimi with).
KIMI_INT4_MOE_MEASURED = (("b200_sxm", 4, 0.069), ("b200_sxm", 64, 0.408), ("b200_sxm", 8192, 3.978),
                          ("h200_sxm", 4, 0.076), ("h200_sxm", 64, 0.466), ("h200_sxm", 8192, 4.337))


def _kimi_int4_moe_ms(gpu, rates, tokens: int) -> float:
    return float(OpModel(gpu, AnalyticParams(), rates).moe(tokens, 7168, 2048, 8, 384, 8, 1, "int4",
                                                           touched=min(384, 8 * tokens))) * 1e3


@pytest.mark.parametrize("gpu_name,tokens,measured_ms", KIMI_INT4_MOE_MEASURED)
def test_kimi_int4_moe_is_priced_at_vllms_marlin_kernel(gpu_name, tokens, measured_ms) -> None:
    """With vLLM's int4 rates each served case is within 30% of its Marlin kernel."""
    gpu = load_gpu(gpu_name)
    assert _kimi_int4_moe_ms(gpu, kernel_rates("vllm", gpu), tokens) == pytest.approx(measured_ms, rel=0.3)


def test_marlin_runs_kimis_int4_math_below_the_op_model_on_blackwell() -> None:
    """Marlin's math runs on warp-level MMA: on Blackwell it does not follow the op model's bf16
    tensor-core peak (the op model alone prices Kimi's 8k-token MoE on B200 at under 0.6 of
    the measured time), while on Hopper it runs above the op model's grouped-GEMM rate."""
    b200, h200 = load_gpu("b200_sxm"), load_gpu("h200_sxm")
    assert kernel_rates("vllm", b200).moe("int4") < 0.8 < 1.0 < kernel_rates("vllm", h200).moe("int4")
    measured = {(g, t): ms for g, t, ms in KIMI_INT4_MOE_MEASURED}
    assert _kimi_int4_moe_ms(b200, NO_RATES, 8192) < 0.6 * measured["b200_sxm", 8192]


def test_marlin_picks_the_smallest_row_block_an_expert_fills_under_90_percent() -> None:
    from servesim.perf.moe_row_blocks import marlin_row_block

    assert marlin_row_block([1.0, 14.3, 14.5, 21.3, 28.7, 29.0, 43.0, 57.5, 58.0, 170.0]).tolist() == \
        [16.0, 16.0, 32.0, 32.0, 32.0, 48.0, 48.0, 64.0, 64.0, 64.0]


def test_only_engines_serving_int4_through_marlin_take_its_row_blocks() -> None:
    """vLLM (Hopper, Blackwell) and SGLang on Hopper run Kimi's int4 experts through Marlin;
    SGLang on Blackwell runs FlashInfer's TensorRT-LLM MoE, with the fused kernels' row tile."""
    assert kernel_rates("vllm", load_gpu("b200_sxm")).int4_marlin
    assert kernel_rates("sglang", load_gpu("h200_sxm")).int4_marlin
    assert not kernel_rates("sglang", load_gpu("b200_sxm")).int4_marlin
    assert not NO_RATES.int4_marlin


def test_kimis_1k_token_int4_prefill_follows_marlins_row_blocks() -> None:
    """A 1k-token prefill gives each of Kimi's 384 experts ~21 rows: Marlin runs 32-row blocks,
    not the 64-row tile of the fused Triton kernels, and its measured time (vLLM, B200, TP 8:
    0.776 ms) is within 20% of the op model's with vLLM's rates; with the 64-row tile it was 38%
    above."""
    gpu = load_gpu("b200_sxm")
    rates = kernel_rates("vllm", gpu)
    ms = float(OpModel(gpu, AnalyticParams(), rates).moe(1024, 7168, 2048, 8, 384, 8, 1, "int4", touched=384)) * 1e3
    assert ms == pytest.approx(0.776, rel=0.2)
    tiled = KernelRates(rates.rates, int4_marlin=False)
    assert float(OpModel(gpu, AnalyticParams(), tiled).moe(1024, 7168, 2048, 8, 384, 8, 1, "int4", touched=384)) * 1e3 > ms * 1.5


def test_fused_activation_quantization_drops_exactly_the_quantization_kernel() -> None:
    """TensorRT-LLM feeds per-tensor fp8 GEMMs activations its producers already quantized: the
    GEMM loses the quantization kernel (its launch, fixed cost and the copy's traffic) and
    nothing else, and so does an NVFP4 GEMM; bf16 GEMMs and the other engines are unchanged."""
    gpu, p = load_gpu("h200_sxm"), AnalyticParams()
    trt = kernel_rates("trtllm", gpu)
    assert trt.act_quant_fused
    assert not kernel_rates("sglang", gpu).act_quant_fused and not kernel_rates("vllm", gpu).act_quant_fused
    base, fused = OpModel(gpu, p), OpModel(gpu, p, KernelRates(act_quant_fused=True))
    m, n, k = 16.0, 8192.0, 8192.0
    quant = base.t_kernel + gpu.quant_op_latency_us["fp8"] * 1e-6 + m * k * (2.0 + 1.0) / base.bw_eff
    assert float(base.gemm(m, n, k, "fp8")) - float(fused.gemm(m, n, k, "fp8")) == pytest.approx(quant, rel=1e-9)
    assert float(fused.gemm(m, n, k, "bf16")) == float(base.gemm(m, n, k, "bf16"))
    # NVFP4 too: the GEMM loses its quantization kernel (at the engine's gemm_quant rate), nothing else
    b200 = load_gpu("b200_sxm")
    rates = kernel_rates("trtllm", b200)
    fused4 = OpModel(b200, p, rates)
    kept4 = OpModel(b200, p, KernelRates(dict(rates.rates), act_quant_fused=False))
    quant4 = kept4.t_kernel + b200.quant_op_latency_us["fp4"] * 1e-6 * rates.gemm_quant("nvfp4") \
        + m * k * (2.0 + weight_bytes("nvfp4")) / kept4.bw_eff
    assert float(kept4.gemm(m, n, k, "nvfp4")) - float(fused4.gemm(m, n, k, "nvfp4")) == pytest.approx(quant4, rel=1e-9)


def test_block_scaled_fp8_keeps_its_quantization_kernel_under_tensorrt_llm() -> None:
    """A per-tensor fp8 Llama decode pass is faster under TensorRT-LLM's rates than without the
    fusion; a block-scaled fp8 checkpoint (DeepSeek) keeps the kernel: the step-time model
    clears the flag."""
    gpu = load_gpu("h200_sxm")
    trt = kernel_rates("trtllm", gpu)
    llama = load_model("meta-llama/Llama-3.1-70B")
    plan = PassPlan(decode_ctx=np.full(8, 2048, dtype=np.int64))
    fused = AnalyticStepTime(llama, gpu, tp=8, weight_dtype="fp8", kernel_rates=trt)
    unfused = AnalyticStepTime(llama, gpu, tp=8, weight_dtype="fp8",
                               kernel_rates=KernelRates(dict(trt.rates), act_quant_fused=False))
    assert fused.pass_time(plan) < 0.95 * unfused.pass_time(plan)
    deepseek = AnalyticStepTime(load_model(DEEPSEEK), gpu, tp=8, weight_dtype="fp8", kernel_rates=trt)
    assert not deepseek.kernel_rates.act_quant_fused


def test_prefill_thread_blocks_fixed_work_is_each_engines_own() -> None:
    """Prefill attention's two rates are fitted together: the kernel's math and its thread
    blocks' fixed work.  FlashAttention-3 on Hopper (SGLang), a persistent kernel that loads its
    next tile while it finishes the last, keeps under half the op model's fixed work; TensorRT-LLM's
    Blackwell kernel more than it.  Without its own factor SGLang's H200 table's chunks of
    128-512 tokens read +13% too slow (median, signed) and TensorRT-LLM's B200 table's −25% too
    fast; with it −3% and −15%."""
    pytest.importorskip("aiconfigurator_core")
    pq = pytest.importorskip("pyarrow.parquet")
    from dataclasses import replace
    from pathlib import Path

    from aiconfigurator_core.sdk import perf_database

    from benchscripts import load_benchmark
    from servesim.perf.analytic_params import AnalyticParams
    from servesim.perf.kernels import OpModel

    assert "prefill_attention_fixed" in OPS
    h200, b200 = load_gpu("h200_sxm"), load_gpu("b200_sxm")
    assert kernel_rates("sglang", h200).prefill_attention_fixed("gqa") < 0.5
    assert kernel_rates("trtllm", b200).prefill_attention_fixed("gqa") > 1.2
    assert NO_RATES.prefill_attention_fixed("gqa") == 1.0

    bk = load_benchmark("bench_kernels")
    root = Path(perf_database.get_systems_paths()[0]) / "data"
    for system, gpu, engine, lo, hi in (("h200_sxm", h200, "sglang", -0.08, 0.08),
                                        ("b200_sxm", b200, "trtllm", -0.20, -0.10)):
        path = {(b, n): f for b, n, f in bk.table_files(root, system)}[(engine, "context_attention_perf")]
        df = pq.read_table(path).to_pandas()
        df = df[(df.latency > 0) & (df.window_size == 0) & ~bk._fallback(df) & (df.isl >= 128) & (df.isl <= 512)]
        g = df.sample(min(300, len(df)), random_state=0)
        kvb = g.kv_cache_dtype.map(bk.KV_BYTES).fillna(2.0).values
        rates = kernel_rates(engine, gpu)
        bias = []
        for r in (rates, replace(rates, rates={k: v for k, v in rates.rates.items() if k[0] != "prefill_attention_fixed"})):
            pred = OpModel(gpu, AnalyticParams(), r).attention_prefill(
                g.batch_size.values, g.isl.values, 0, g.num_heads.values, g.num_key_value_heads.values,
                g.head_dim.values, 0, kvb) * 1e3
            bias.append(float(np.median(pred / g.latency.values - 1.0)))
        assert lo <= bias[0] <= hi and abs(bias[0]) < abs(bias[1]) - 0.08, (engine, bias)


def test_prefill_math_rates_never_lift_efficiency_past_the_ceiling() -> None:
    """Every recorded prefill-attention math rate keeps ``rate × attn_prefill_eff_max`` at or under
    1: an engine's kernel reaches at most the GPU's measured ceiling (a freely fitted rate of 1.91
    stood in for FlashAttention-3's unmodelled 192-row tiles)."""
    from servesim.perf.analytic_params import AnalyticParams

    lo, hi = rate_range("prefill_attention")
    assert hi * AnalyticParams().attn_prefill_eff_max == pytest.approx(1.0)
    for table in engine_kernels._table().values():
        for (op, _fmt), rate in table.items():
            if op == "prefill_attention":
                assert lo <= rate <= hi


def test_squared_relu_moe_rows_are_their_own_path_only_beside_a_gated_default():
    """TensorRT-LLM's ``*_nongated`` MoE rows (Nemotron-H's squared-ReLU experts) are priced with
    rates of their own where the table also times the format's default path on gated experts
    (Blackwell NVFP4), and stay the engine's measurement of its MoE where they are the format's
    only rows (Hopper bf16 and per-tensor fp8): bench_kernels.moe_kernel_path."""
    from servesim.perf.engine_kernels import MOE_KERNEL_PATHS
    from tests.benchscripts import load_benchmark

    bk = load_benchmark("bench_kernels")
    assert bk.NONGATED in MOE_KERNEL_PATHS
    assert bk.moe_kernel_path("moe_torch_flow_nongated", "nvfp4", "trtllm", 10) == bk.NONGATED
    assert bk.moe_kernel_path("moe_torch_flow_min_latency", "nvfp4", "trtllm", 10) is None  # the default
    assert bk.moe_kernel_path("moe_torch_flow_nongated", "bfloat16", "trtllm", 9) is None
    assert bk.moe_kernel_path("moe_torch_flow_nongated", "fp8", "trtllm", 9) is None
    # the gated NVFP4 experts TensorRT-LLM serves on Blackwell are priced with rates fitted without them
    b200 = load_gpu("b200_sxm")
    rates = kernel_rates("trtllm", b200)
    assert rates.rates[("moe_fixed", "fp4@nongated")] != rates.rates[("moe_fixed", "fp4")]
