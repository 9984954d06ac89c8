import json
import math

import numpy as np
import pytest

from servesim.hardware import load_gpu
from servesim.models import load_model, parse_config
from servesim.perf.analytic import AnalyticStepTime
from servesim.perf.analytic_params import AnalyticParams
from servesim.perf.expert_balance import expected_busiest_touched
from servesim.perf.plan import PassPlan, StepTimeModel, stretch_by_steps

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
        "intermediate_size": 4096, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
        "vocab_size": 32000}

# a params set with no overheads and perfect efficiencies, so hand computations are exact
IDEAL = AnalyticParams(gemm_eff_max=1.0, gemm_half_tokens=0.0, moe_eff_scale=1.0, moe_half_tokens=0.0, mem_eff=1.0,
                       attn_prefill_eff_max=1.0, attn_prefill_half_tokens=0.0, attn_decode_mem_eff=1.0,
                       attn_decode_compute_eff=1.0, attn_decode_ctx_overhead_tokens=0.0, attn_decode_unit_s=0.0,
                       elementwise_bytes_per_token=0.0, pass_overhead_s=0.0, layer_overhead_s=0.0,
                       graph_pass_overhead_s=0.0, graph_layer_overhead_s=0.0)


def plan(new=(), cached=(), ctx=()):
    return PassPlan(prefill_new=np.array(new, dtype=np.int64), prefill_cached=np.array(cached, dtype=np.int64),
                    decode_ctx=np.array(ctx, dtype=np.int64))


def tiny_model(tmp_path=None):
    return parse_config(TINY, name="tiny")


def test_protocol():
    st = AnalyticStepTime(load_model("qwen3-32b"), load_gpu("h100"))
    assert isinstance(st, StepTimeModel)


def ideal_gpu():
    """H100 without wave quantization, kernel latency, streaming ramp or measured ceilings: hand-checkable."""
    return load_gpu("h100_sxm").model_copy(update={"sm_count": None, "kernel_latency_us": 0.0, "achievable": {},
                                                   "stream_ramp_us": 0.0})


def _gemm(m, n, k, bw, peak):
    return max(2 * m * n * k / peak, (n * k * 2 + m * k * 2 + m * n * 2) / bw)


def test_tiny_decode_by_hand():
    m, g = tiny_model(), ideal_gpu()
    st = AnalyticStepTime(m, g, params=IDEAL)
    bw, peak = 3350e9, 989.4e12
    h, i, L, V = 1024, 4096, 4, 32000
    # one decode request, ctx 1000: every GEMM (q/k/v, o, gate-up, down, LM head) is memory bound
    T = 1
    gemm = L * sum(_gemm(T, n, k, bw, peak) for n, k in ((1024 + 2 * 256, h), (h, 1024), (2 * i, h), (h, i)))
    lm = _gemm(T, V, h, bw, peak)
    kv = 1000 * L * 2 * 2 * 128 * 2  # ctx × layers × (k,v) × kv heads × head_dim × bf16
    attn = max(1000 * L * 4 * 8 * 128 / peak, kv / bw)
    assert st.pass_time(plan(ctx=[1000])) == pytest.approx(gemm + lm + attn, rel=1e-12)


def test_tiny_prefill_attention_flops_by_hand():
    from servesim.perf.kernels import ATTN_CTA_OVERHEAD_BLOCKS as F

    m, g = tiny_model(), ideal_gpu()
    st = AnalyticStepTime(m, g, params=IDEAL)
    n, c = 512, 1024  # four whole 128-row query blocks, each with its fixed work of F key blocks
    pairs = n * c + n * (n + 1) / 2 + 4 * F * 128 * 128
    flops = pairs * 4 * 8 * 128 * 4  # 4 FLOPs × heads × head_dim per pair, 4 layers
    read = (n + c) * 4 * 2 * 2 * 128 * 2
    # each new token's query read and output write (8 heads × 128 × bf16 each) and its K and V
    # (2 KV heads × 128) read in bf16 and written to the cache, 4 layers, after the math
    tok = 4 * (2 * 8 * 128 * 2 + 2 * 2 * 128 * (2 + 2)) / 3350e9
    assert st._prefill_attn([n], [c]) == pytest.approx(max(flops / 989.4e12, read / 3350e9) + n * tok, rel=1e-12)
    # two chunks are each their own causal triangle over their own prefix
    pairs2 = pairs + n * (n + 1) / 2 + 4 * F * 128 * 128
    read2 = read + n * 4 * 2 * 2 * 128 * 2
    two = st._prefill_attn([n, n], [c, 0])
    assert two == pytest.approx(max(pairs2 * 4 * 8 * 128 * 4 / 989.4e12, read2 / 3350e9) + 2 * n * tok, rel=1e-12)
    # a 100-token chunk computes a whole 128-row block; only its own tokens' traffic is less
    assert st._prefill_attn([100], [0]) == pytest.approx(st._prefill_attn([128], [0]) - 28 * tok, rel=1e-12)


def test_distinct_experts_formula():
    E, k = 256, 8
    assert AnalyticStepTime.expected_distinct_experts(E, k, 1) == pytest.approx(8)
    assert AnalyticStepTime.expected_distinct_experts(E, k, 10) == pytest.approx(E * (1 - (1 - k / E) ** 10))
    assert AnalyticStepTime.expected_distinct_experts(E, k, 10_000) == pytest.approx(E)
    # decode of a MoE: weight bytes grow with batch until all experts are touched
    st = AnalyticStepTime(load_model("deepseek-v3"), load_gpu("h200"), tp=8, ep=8, weight_dtype="fp8",
                          kv_dtype="fp8")
    t1 = st.pass_time(plan(ctx=[1000]))
    t32 = st.pass_time(plan(ctx=[1000] * 32))
    assert t32 > 3 * t1 * 0.5 and t32 < 32 * t1


def test_weight_only_4bit_moe_decode_streams_weights_and_pays_its_tiles_math_on_hopper():
    """gpt-oss (mxfp4 experts) on H200 has no fp4 math: experts run at the bf16 peak (W4A16).

    At decode batch sizes each touched expert sees one or two rows; grouped-GEMM kernels pad
    them to a small (16-row) tile.  A pass reads the touched experts' weights, and the padded
    tiles' math at the grouped GEMM's measured efficiency (``moe_eff_scale``, from the MoE
    kernel tables) costs about as much: the time is never below the weight stream and within
    1.5x of it, and it is the max of the two, expert by expert.
    """
    from servesim.perf.kernels import MOE_KERNELS
    from servesim.perf.precision import weight_bytes

    model = load_model("openai/gpt-oss-120b")
    st = AnalyticStepTime(model, load_gpu("h200_sxm"), weight_dtype="mxfp4", kv_dtype="bf16")
    moe, ops = st._moe, st._ops
    h, i = model.hidden_size, model.moe_intermediate_size
    w_s = 3 * h * i * weight_bytes("mxfp4") / ops.bw_eff
    io_s = (2 * h + 3 * i) * 2.0 / ops.bw_eff
    for batch in (4, 16, 32):
        frac = 1 - (1 - moe["k"] / moe["E"]) ** batch
        weights = MOE_KERNELS * ops.t_kernel + moe["local"] * frac * w_s + batch * moe["k"] * io_s
        t = st._moe_time(batch)
        assert moe["layers"] * weights <= t * (1 + 1e-9) < 1.5 * moe["layers"] * weights
    # at prefill sizes the same experts are compute bound
    tokens = 8192
    assign = tokens * moe["k"]
    assert st._moe_time(tokens) > 1.5 * moe["layers"] * (moe["local"] * w_s + assign * io_s)


def _simulated_busiest(E: int, k: int, ranks: int, tokens: int, trials: int, rng) -> float:
    """Mean over trials of the largest count of touched experts on a rank, each token routed to
    k distinct experts uniformly, experts spread over the ranks as evenly as they go."""
    touched = np.zeros((trials, E), dtype=bool)
    for _ in range(tokens):
        picks = np.argpartition(rng.random((trials, E)), k, axis=1)[:, :k]
        np.put_along_axis(touched, picks, True, axis=1)
    bounds = np.cumsum([0] + [E // ranks + (r < E % ranks) for r in range(ranks)])
    per_rank = np.stack([touched[:, a:b].sum(axis=1) for a, b in zip(bounds[:-1], bounds[1:])], axis=1)
    return float(per_rank.max(axis=1).mean())


@pytest.mark.parametrize("E,k,ranks", [(256, 8, 8), (100, 4, 8), (8, 2, 16)])
def test_busiest_expert_rank_matches_simulated_routing(E, k, ranks):
    """The expected largest count of touched experts over expert-parallel ranks against random
    routing: even splits, uneven ones (100 experts on 8 ranks: 12 or 13), more ranks than experts
    (every token touches k experts, so the busiest rank always has one)."""
    rng = np.random.default_rng(7)
    for tokens in (1, 4, 16, 64):
        frac = 1 - (1 - k / E) ** tokens
        want = _simulated_busiest(E, k, ranks, tokens, 2000, rng)
        assert expected_busiest_touched(E, frac, ranks, k) == pytest.approx(want, rel=0.03), tokens


def test_busiest_expert_rank_limits():
    frac = 1 - (1 - 8 / 256) ** 4
    assert expected_busiest_touched(256, frac, 1) == pytest.approx(256 * frac)
    assert 32 * frac < expected_busiest_touched(256, frac, 8) <= 32
    assert expected_busiest_touched(256, 1.0, 8) == 32 and expected_busiest_touched(100, 1.0, 8) == 13
    assert expected_busiest_touched(256, 0.0, 8) == 0.0
    # more ranks to wait for: a larger expected maximum, though each holds fewer experts
    assert expected_busiest_touched(256, frac, 16) / 16 > expected_busiest_touched(256, frac, 8) / 32


def test_expert_parallel_decode_waits_for_the_busiest_rank():
    """At small decode batches an expert-parallel layer reads the weights of the busiest rank's
    touched experts, not the average rank's; once every expert is touched (large batches) the
    two are the same."""
    model, gpu = load_model("deepseek-v3"), load_gpu("b200")
    # routed pairs only (an all-to-all dispatch): the masked slots are another test's
    st = AnalyticStepTime(model, gpu, tp=8, ep=8, weight_dtype="fp8", kv_dtype="fp8", moe_all_to_all=True)
    average = AnalyticStepTime(model, gpu, tp=8, ep=8, weight_dtype="fp8", kv_dtype="fp8", moe_all_to_all=True)
    average._moe["ep"] = 1  # the average rank: local × P(touched) experts
    frac = 1 - (1 - 8 / 256) ** 4
    # weight-bound decode of 4 tokens: 6.6 experts on the busiest of 8 ranks, 3.8 on average
    busiest = st._ops.moe(4, model.hidden_size, model.moe_intermediate_size, 8, 256, 1, 8, "fp8",
                          touched=expected_busiest_touched(256, frac, 8))
    assert st._moe_time(4) == pytest.approx(model.num_moe_layers * float(busiest), rel=1e-9)
    assert st._moe_time(4) > 1.3 * average._moe_time(4)
    assert st._moe_time(4096) == pytest.approx(average._moe_time(4096), rel=1e-9)


def test_decode_memory_bound_prefill_compute_bound():
    st = AnalyticStepTime(load_model("llama-3.1-70b"), load_gpu("h100"), tp=4)
    comp, mem = st.gemm_roofline_terms(4)
    assert mem > 2 * comp  # 4 rows fill a 64-row tile: 16× the ideal math, still memory bound
    comp, mem = st.gemm_roofline_terms(8192)
    assert comp > 2 * mem


@pytest.mark.parametrize("name,gpu,tp,ep,wd,kd", [
    ("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", 1, 1, "bf16", "bf16"),
    ("Qwen/Qwen3-235B-A22B-FP8", "h200_sxm", 4, 4, "fp8", "fp8"),
    ("deepseek-ai/DeepSeek-R1", "b200_sxm", 8, 8, "fp4", "fp8"),
    ("openai/gpt-oss-120b", "h100_sxm", 2, 1, "mxfp4", "fp8"),
    ("zhipuai/GLM-5", "h200_sxm", 8, 8, "fp8", "fp8"),
    ("Qwen/Qwen3.5-397B-A17B", "b200_sxm", 4, 4, "fp8", "bf16"),
])
def test_monotonic(name, gpu, tp, ep, wd, kd):
    st = AnalyticStepTime(load_model(name), load_gpu(gpu), tp=tp, ep=ep, weight_dtype=wd, kv_dtype=kd)
    rng = np.random.default_rng(1)
    ctx = rng.integers(10, 20000, size=64)
    base = st.pass_time(plan(ctx=ctx))
    assert st.pass_time(plan(ctx=np.append(ctx, 100))) >= base  # more requests
    assert st.pass_time(plan(ctx=ctx + 500)) >= base  # longer contexts
    prev = 0.0
    for n in [1, 16, 256, 2048, 8192]:
        t = st.pass_time(plan(new=[n], cached=[3000], ctx=ctx))
        assert t >= prev  # more prefill tokens
        prev = t
    assert st.pass_time(plan(new=[1000], cached=[5000])) >= st.pass_time(plan(new=[1000], cached=[0]))


def test_more_tp_not_slower_for_memory_bound_decode():
    m, g = load_model("llama-3.1-70b"), load_gpu("h100")
    times = [AnalyticStepTime(m, g, tp=tp).pass_time(plan(ctx=[4000] * 8)) for tp in (1, 2, 4, 8)]
    assert all(b <= a for a, b in zip(times, times[1:]))


@pytest.mark.parametrize("name,tp,ep", [("llama-3.1-8b-instruct", 1, 1), ("gpt-oss-120b", 2, 1),
                                        ("GLM-5", 8, 8), ("Qwen3-Next-80B-A3B-Instruct", 2, 2),
                                        ("deepseek-r1", 8, 8)])
def test_stretch_equals_pass_by_pass(name, tp, ep):
    st = AnalyticStepTime(load_model(name), load_gpu("b200"), tp=tp, ep=ep, weight_dtype="fp8", kv_dtype="fp8")
    rng = np.random.default_rng(7)
    for n in (1, 5, 70):
        ctx = rng.integers(1, 3000, size=n)
        ctx[0] = 126  # crosses a 128 window during the stretch
        fast = st.decode_stretch_times(ctx, 300)
        ref = stretch_by_steps(st, ctx, 300)
        np.testing.assert_allclose(fast, ref, rtol=1e-12, atol=0)
    assert st.decode_stretch_times(np.zeros(0, dtype=np.int64), 3).shape == (3,)


def test_attention_dp_runs():
    st = AnalyticStepTime(load_model("deepseek-r1"), load_gpu("h200"), tp=1, ep=8, attention_dp=8,
                          weight_dtype="fp8", kv_dtype="fp8")
    t = st.pass_time(plan(new=[2000], cached=[0], ctx=[1000] * 64))
    assert math.isfinite(t) and t > 0


def test_cuda_graph_decode_cheaper_overhead():
    p = AnalyticParams()
    assert p.graph_pass_overhead_s < p.pass_overhead_s
    with pytest.raises(Exception):
        AnalyticParams(not_a_param=1)


@pytest.mark.parametrize("name,tp,ep,dp", [("llama-3.1-70b", 8, 1, 1), ("deepseek-r1", 1, 8, 8),
                                           ("llama-3.1-70b", 1, 1, 1)])
def test_comm_time_scale_multiplies_exactly_the_collectives(name, tp, ep, dp):
    """comm_time_scale (calibrated per group) scales every collective and nothing else: the pass
    time is linear in it with the collectives' time as slope, and a single GPU has none."""
    m, g = load_model(name), load_gpu("h100")
    p = plan(new=[2048], cached=[0], ctx=[1000] * 64)

    def time_at(scale, comm_eff=0.7):
        params = AnalyticParams(comm_time_scale=scale, comm_eff=comm_eff)
        return AnalyticStepTime(m, g, tp=tp, ep=ep, attention_dp=dp, weight_dtype="fp8",
                                params=params).pass_time(p)

    t1, t2, t3 = time_at(1.0), time_at(2.0), time_at(3.0)
    assert t3 - t2 == pytest.approx(t2 - t1, rel=1e-9)
    comm = t2 - t1
    if tp * dp == 1:
        assert comm == 0.0
    else:
        assert comm > 0.0
        if dp == 1:
            # the tensor-parallel all-reduce follows H100's measured custom all-reduce law:
            # the links' efficiency does not enter
            assert g.custom_all_reduce is not None
            assert time_at(1.0, comm_eff=0.35) == t1
        else:
            # halving the link efficiency adds the bandwidth part once more; the scale also
            # multiplied the fixed per-call part, so the bandwidth part is a share of its slope
            assert 0.0 < time_at(1.0, comm_eff=0.35) - t1 < comm


def test_qk_norm_across_heads_adds_one_small_all_reduce_per_attention_layer():
    """MiniMax-M2 (``qk_norm_type: per_layer``) norms q and k over every head, so each attention
    layer all-reduces two fp32 sums of squares per token across the tensor-parallel ranks; the
    same model with per-head norms, or on one GPU, has none."""
    import dataclasses

    from servesim.perf.analytic import QK_NORM_BYTES_PER_TOKEN
    from servesim.perf.kernels import OpModel

    m = load_model("MiniMaxAI/MiniMax-M2.5")
    assert m.qk_norm_across_heads and not load_model("qwen3-32b").qk_norm_across_heads
    per_head = dataclasses.replace(m, qk_norm_across_heads=False)
    g = load_gpu("h200")
    for tp in (1, 4):
        across = AnalyticStepTime(m, g, tp=tp, weight_dtype="fp8")
        plain = AnalyticStepTime(per_head, g, tp=tp, weight_dtype="fp8")
        for p in (plan(ctx=[2000] * 16), plan(new=[3000], cached=[0], ctx=[500] * 4)):
            tokens = p.num_tokens
            extra = across.pass_time(p) - plain.pass_time(p)
            if tp == 1:
                assert extra == 0.0
                continue
            ar = float(OpModel(g, across.p, across.kernel_rates).all_reduce(tokens * QK_NORM_BYTES_PER_TOKEN, tp))
            assert ar > 1e-6  # a few microseconds: latency-bound
            assert extra == pytest.approx(m.num_full_layers * ar, rel=1e-9)


@pytest.mark.parametrize("dp", [1, 4])
def test_decode_attention_is_the_op_models_kernel_per_layer(dp):
    """A pass's decode attention (memory bound: GQA, bf16 KV) is, per layer, the op model's
    attention kernel without its fixed launches: the KV stream at the decode bandwidth plus the
    streaming kernel's ramp and tail (``GPUSpec.stream_ramp_us``), each attention-DP rank paying
    its own ramp on its share; one rank's own requests (``ranks=1``) the same on their sum."""
    from servesim.perf.kernels import ATTN_KERNELS, OpModel

    m, g = load_model("meta-llama/Llama-3.1-8B-Instruct"), load_gpu("b200_sxm")
    assert g.stream_ramp_us > 0
    st = AnalyticStepTime(m, g, attention_dp=dp)
    ops = OpModel(g, st.p)
    n, ctx = 16 * dp, 3000
    s_full = float(n * ctx)
    per_rank = n // dp
    kernel = ops.attention_decode(per_rank, ctx, m.num_attention_heads, m.num_kv_heads, m.head_dim)
    body = float(kernel) - ATTN_KERNELS * ops.t_kernel  # the launches are priced with the layer's fixed work
    assert st._decode_attn(n, s_full, 0.0) == pytest.approx(m.num_layers * body, rel=1e-9)
    assert st._decode_attn(per_rank, float(per_rank * ctx), 0.0, 1, 1) == pytest.approx(m.num_layers * body, rel=1e-9)
    flat = AnalyticStepTime(m, g.model_copy(update={"stream_ramp_us": 0.0}), attention_dp=dp)
    gain = st._decode_attn(n, s_full, 0.0) - flat._decode_attn(n, s_full, 0.0)
    assert 0 < gain <= m.num_layers * g.stream_ramp_us * 1e-6


@pytest.mark.parametrize("hidden,heads", [(1024, 8), (512, 8)])
def test_prefill_attention_is_the_op_models_kernel_per_layer(hidden, heads):
    """A pass's prefill attention is, per layer, the op model's flash-attention kernel without
    its fixed launches, thread blocks' fixed work included, at head size 128 and 64 alike."""
    from servesim.perf.kernels import ATTN_KERNELS, OpModel

    m = parse_config({**TINY, "hidden_size": hidden, "num_attention_heads": heads, "num_key_value_heads": 2},
                     name="tiny")
    g = load_gpu("h100_sxm")
    st = AnalyticStepTime(m, g)
    ops = OpModel(g, st.p)
    for n, c in ((300, 0), (2048, 4096)):
        kernel = float(ops.attention_prefill(1, n, c, heads, 2, m.head_dim)) - ATTN_KERNELS * ops.t_kernel
        assert st._prefill_attn([n], [c]) == pytest.approx(m.num_layers * kernel, rel=1e-9)


@pytest.mark.parametrize("engine,kv_heads", [("trtllm", 1), ("trtllm", 2), ("vllm", 1)])
def test_decode_attention_work_units_are_the_op_models(engine, kv_heads):
    """A pass's GQA decode attention is, per layer, the op model's kernel with its work units: one
    per (request, KV head) — or, where the engine's kernel does not take the head group
    (TensorRT-LLM beyond 32 query heads per KV head), one per (request, query head), each
    streaming its KV head — at short and long context alike."""
    from servesim.perf.engine_kernels import kernel_rates
    from servesim.perf.kernels import ATTN_KERNELS, OpModel

    m = parse_config({**TINY, "hidden_size": 64 * 128, "num_attention_heads": 64, "num_key_value_heads": kv_heads},
                     name="tiny-mqa")
    g = load_gpu("h200_sxm")
    rates = kernel_rates(engine, g)
    st = AnalyticStepTime(m, g, kernel_rates=rates)
    ops = OpModel(g, st.p, rates)
    per_query_head = engine == "trtllm" and 64 / kv_heads > 32
    assert float(ops.decode_streams(64, kv_heads)) == (64 if per_query_head else kv_heads)
    for n, ctx in ((512, 2), (8, 8000)):
        body = float(ops.attention_decode(n, ctx, 64, kv_heads, m.head_dim)) - float(ops.decode_fixed("gqa"))
        assert st._decode_attn(n, float(n * ctx), 0.0) == pytest.approx(m.num_layers * body, rel=1e-9)
    # the op's fixed cost (the engine's factor for a bf16 cache) is the pass's, once per layer
    assert st._attn_dec_fixed == pytest.approx(m.num_layers * (float(ops.decode_fixed("gqa")) - ATTN_KERNELS * ops.t_kernel),
                                               abs=1e-15)


@pytest.mark.parametrize("tp,kv_dtype", [(2, "bf16"), (1, "fp8")])
def test_mla_decode_is_the_op_models_kernel_per_layer(tp, kv_dtype):
    """DeepSeek-V3's decode attention is, per layer, the op model's absorbed MLA kernel: the latent
    streamed per request, its blocks of 64 query heads (one at TP 2, two at TP 1) each a work unit
    adding its time whether the kernel's math or its stream bounds it (here its math)."""
    from servesim.perf.kernels import ATTN_KERNELS, OpModel

    m, g = load_model("deepseek-ai/DeepSeek-V3"), load_gpu("h200_sxm")
    st = AnalyticStepTime(m, g, tp=tp, kv_dtype=kv_dtype)
    ops = OpModel(g, st.p)
    kvb = 2.0 if kv_dtype == "bf16" else 1.0
    heads = m.num_attention_heads // tp
    for n, ctx in ((256, 3), (16, 6000)):
        body = float(ops.mla_decode(n, ctx, heads, m.qk_rope_head_dim, m.kv_lora_rank, kvb)) - ATTN_KERNELS * ops.t_kernel
        assert st._decode_attn(n, float(n * ctx), 0.0) == pytest.approx(m.num_layers * body, rel=1e-9)
    flat = OpModel(g, st.p.model_copy(update={"attn_decode_unit_s": 0.0}))
    units = float(ops.mla_decode(256, 3, heads, kv_bytes=kvb)) - float(flat.mla_decode(256, 3, heads, kv_bytes=kvb))
    assert units == pytest.approx(256 * (128 // tp // 64) * st.p.attn_decode_unit_s / g.sm_count, rel=1e-6)


@pytest.mark.parametrize("layers,window", [(["full_attention"] * 4, None), (["sliding_attention", "full_attention"] * 2, 128)])
def test_packed_gqa_prefill_is_the_op_models_kernel_per_layer(layers, window):
    """Under an engine whose Hopper prefill kernel packs a KV head's query heads into one block
    (SGLang's FlashAttention-3), a pass's prefill attention is, per layer, the op model's packed
    kernel — full-attention and sliding-window layers alike packed (the windowed ones over the
    key blocks their packed blocks reach, attention_blocks.packed_window_key_blocks) — and a short chunk
    costs far less than per-query-head blocks would."""
    from servesim.perf.engine_kernels import kernel_rates
    from servesim.perf.kernels import ATTN_KERNELS, OpModel

    cfg = {**TINY, "layer_types": layers} if window is None else {**TINY, "layer_types": layers, "sliding_window": window}
    m = parse_config(cfg, name="tiny-pack")
    g = load_gpu("h100_sxm")
    rates = kernel_rates("sglang", g)
    assert rates.prefill_pack_gqa and not kernel_rates("trtllm", g).prefill_pack_gqa
    st = AnalyticStepTime(m, g, kernel_rates=rates)
    ops = OpModel(g, st.p, rates)
    nw = 2 if window else 0
    for n, c in ((1, 0), (300, 0), (2048, 4096)):
        full, windowed = (float(ops.attention_prefill(1, n, c, 8, 2, m.head_dim, window=w)) - ATTN_KERNELS * ops.t_kernel
                          for w in (0, window or 0))
        assert st._prefill_attn([n], [c]) == pytest.approx((4 - nw) * full + nw * windowed, rel=1e-9)
    unpacked = OpModel(g, st.p)
    t1 = [float(o.attention_prefill(128, 1, 0, 48, 2, 128)) for o in (ops, unpacked)]
    assert t1[0] < 0.3 * t1[1]  # measured on H200: 19 us packed (the per-query-head model: 255 us)


@pytest.mark.parametrize("engine", ["trtllm", "vllm"])
def test_sliding_window_prefill_is_the_op_models_windowed_kernel(engine):
    """A pass's prefill attention on a model with sliding-window layers (gpt-oss's pattern:
    alternating 128-token windows and full attention) is, per layer, the op model's kernel of
    each kind — the windowed layers at whole key blocks and at the engine's windowed-kernel
    rate — for chunks with and without a cached prefix, and a chunk whose whole context fits
    the window at the full kernel (nothing to mask)."""
    from servesim.perf.engine_kernels import kernel_rates
    from servesim.perf.kernels import ATTN_KERNELS, OpModel

    m = parse_config({**TINY, "layer_types": ["sliding_attention", "full_attention"] * 2, "sliding_window": 128},
                     name="tiny-window")
    g = load_gpu("b200_sxm")
    rates = kernel_rates(engine, g)
    assert rates.prefill_attention("gqa_window") != rates.prefill_attention("gqa")
    st = AnalyticStepTime(m, g, kernel_rates=rates)
    ops = OpModel(g, st.p, rates)
    for n, c in ((300, 0), (2048, 4096), (100, 70), (100, 20)):
        full, windowed = (float(ops.attention_prefill(1, n, c, 8, 2, m.head_dim, window=w)) - ATTN_KERNELS * ops.t_kernel
                          for w in (0, 128))
        if c > 1000:  # a window far shorter than the context: far fewer key blocks
            assert windowed < 0.2 * full
        if n + c <= 128:  # a window over the whole context masks nothing: the full kernel
            assert windowed == full
        assert st._prefill_attn([n], [c]) == pytest.approx(2 * full + 2 * windowed, rel=1e-9)
