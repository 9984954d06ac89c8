"""Expert parallelism with and without an all-to-all dispatch in the step-time model.

Without an all-to-all (SGLang's StandardDispatcher, vLLM's expert map and its all-gather /
reduce-scatter all2all manager, TensorRT-LLM without its NVLink all-to-all) every
expert-parallel rank's fused MoE runs over the whole batch — replicated by tensor parallelism,
or gathered from the attention-DP ranks — with the remote experts' ids masked, so its kernel
moves all ``tokens × k`` slots (``OpModel.moe(slots=...)``); with one, it gets its routed pairs.
"""

from __future__ import annotations

import numpy as np
import pytest

from servesim.engines.planning import PlanInputs
from servesim.engines.sglang.options import SGLangOptions
from servesim.engines.sglang.planner import plan_sglang
from servesim.engines.trtllm.options import TRTLLMOptions
from servesim.engines.trtllm.planner import plan_trtllm
from servesim.engines.vllm.options import VLLMOptions
from servesim.engines.vllm.planner import plan_vllm
from servesim.hardware import load_gpu
from servesim.models import load_model
from servesim.perf.analytic import AnalyticStepTime
from servesim.perf.engine_kernels import kernel_rates
from servesim.perf.memory import Layout
from servesim.perf.plan import PassPlan

MODEL = "deepseek-ai/DeepSeek-V3"


def _st(gpu="b200_sxm", engine="sglang", a2a=False, tp=8, ep=8, dp=1, dtype="fp4"):
    g = load_gpu(gpu)
    return AnalyticStepTime(load_model(MODEL), g, tp=tp, ep=ep, attention_dp=dp, weight_dtype=dtype, kv_dtype="fp8",
                            kernel_rates=kernel_rates(engine, g), moe_all_to_all=a2a)


def _routed_and_masked(st, t):
    """One layer's OpModel.moe at ``t`` tokens with the routed pairs only and with every slot."""
    m, moe = st.model, st._moe
    st._moe_time(t)  # fills the busiest-rank memo
    touched = moe["busiest"][t]
    args = (t, m.hidden_size, m.moe_intermediate_size, moe["k"], moe["E"], moe["moe_tp"], st.layout.ep, moe["dtype"])
    routed = float(st._ops.moe(*args, touched=touched))
    masked = float(st._ops.moe(*args, touched=touched, slots=t * moe["k"]))
    return routed, masked


@pytest.mark.parametrize("gpu,engine,dtype", [("b200_sxm", "sglang", "fp4"), ("h200_sxm", "sglang", "fp8"),
                                              ("h200_sxm", "vllm", "fp8"), ("h200_sxm", "trtllm", "fp8")])
def test_masked_expert_parallelism_prices_every_slot_of_the_batch(gpu, engine, dtype):
    masked_st = _st(gpu, engine, a2a=False, dtype=dtype)
    a2a_st = _st(gpu, engine, a2a=True, dtype=dtype)
    layers = masked_st.model.num_moe_layers
    for t in (1, 64, 256, 1024):
        routed, masked = _routed_and_masked(masked_st, t)
        assert masked_st._moe_time(t) == pytest.approx(layers * masked, rel=1e-12)
        assert a2a_st._moe_time(t) == pytest.approx(layers * routed, rel=1e-12)
    # a batch of a few hundred decode tokens streams the touched weights and moves the slots:
    # the masked 7/8 of them make the kernel measurably slower than the all-to-all one
    assert masked_st._moe_time(256) > 1.02 * a2a_st._moe_time(256)


def test_without_expert_parallelism_nothing_is_masked():
    st = _st(ep=1)
    assert st._moe["slots_per_token"] is None
    assert _st(ep=1, a2a=True)._moe_time(512) == st._moe_time(512)


def _decode(ctx) -> PassPlan:
    return PassPlan(decode_ctx=np.asarray(ctx, dtype=np.int64))


def _dp_plan(per_rank: int, ranks: int = 8) -> PassPlan:
    """A decode pass of an attention-DP worker: ``per_rank`` requests on each of ``ranks`` ranks."""
    sub = tuple(_decode(np.full(per_rank, 1000)) for _ in range(ranks))
    return PassPlan(decode_ctx=np.concatenate([r.decode_ctx for r in sub]), ranks=sub)


def test_dp_attention_masked_moe_grows_with_the_gathered_batch():
    """SGLang's DP attention with --ep-size and no a2a backend: each rank's MoE runs over all
    ranks' tokens.  Its expert layers cost the masked op at the gathered batch, which grows with
    every rank's requests; with DeepEP each rank's kernel gets its routed pairs only."""
    masked = _st(tp=1, dp=8, a2a=False)
    a2a = _st(tp=1, dp=8, a2a=True)
    layers = masked.model.num_moe_layers
    for per_rank in (4, 32):
        gathered = 8 * per_rank
        _, one_layer = _routed_and_masked(masked, gathered)
        assert masked._moe_time(gathered) == pytest.approx(layers * one_layer, rel=1e-12)
        shared_masked = masked.rank_shared_time(gathered, per_rank, True, per_rank)
        shared_a2a = a2a.rank_shared_time(gathered, per_rank, True, per_rank)
        # the rest of the shared layers (router, shared experts, dense layers, overhead) is the same
        rest = [st_ - st._moe_time(gathered) - st._a2a[0] - st._a2a[1] * gathered - st._gather_time(gathered)
                for st, st_ in ((masked, shared_masked), (a2a, shared_a2a))]
        assert rest[0] == pytest.approx(rest[1], rel=1e-9)
        assert masked._moe_time(gathered) > a2a._moe_time(gathered)
    assert masked._moe_time(256) > masked._moe_time(32)
    # the pass prices it: more requests on the other ranks make one rank's pass slower
    assert masked.pass_time(_dp_plan(32)) > masked.pass_time(_dp_plan(4))


def test_dp_attention_collectives_follow_the_dispatch():
    """Gathered: per MoE layer an NCCL all-gather of the ranks' hidden states and a reduce-scatter
    back (vLLM's AgRsAll2AllManager, TensorRT-LLM's allgather / reducescatter) at the GPU's
    measured laws, sized by the gathered batch; all-to-all: the expert-parallel dispatch and
    combine of each token's k copies.  Both keep the dense layers' all-reduces."""
    masked = _st(tp=1, dp=8, a2a=False)
    a2a = _st(tp=1, dp=8, a2a=True)
    m, p = masked.model, masked.p
    link = masked.gpu.scale_up.bandwidth_gbs * 1e9 * p.comm_eff / p.comm_time_scale
    h, g, nm, k = m.hidden_size, 8, m.num_moe_layers, m.experts_per_token
    dense = m.num_dense_layers * 2 * (g - 1) / g * h * 2 / link
    assert masked._a2a[1] == pytest.approx(dense, rel=1e-12)
    assert a2a._a2a[1] == pytest.approx(2 * nm * k * (g - 1) / g * h * 2 / link / g + dense, rel=1e-12)
    assert a2a._gather_time(256) == 0.0
    ops = masked._ops
    for tokens in (8, 256, 4096):
        nbytes = tokens * h * 2.0
        want = nm * (float(ops.all_gather(nbytes, g)) + float(ops.nccl("reduce_scatter", nbytes, g)))
        assert masked._gather_time(tokens) == pytest.approx(want, rel=1e-12)
    # the shared part of an attention-DP pass carries it, sized by the busiest rank's tokens
    shared = masked.rank_shared_time(100, 30, True, 30)
    assert shared - masked._moe_time(100) - masked._gemms_time(masked._mlp_gemms, 100) - masked._a2a[0] \
        - masked._a2a[1] * 240 - masked._pass_overhead(True, 30) == pytest.approx(masked._gather_time(240), rel=1e-9)
    # without attention DP the tensor-parallel all-reduce after the MoE is the combine either way
    single = (_st(a2a=False), _st(a2a=True))
    assert single[0]._a2a == single[1]._a2a == (0.0, 0.0)
    assert single[0]._gather_time(256) == single[1]._gather_time(256) == 0.0


@pytest.mark.parametrize("a2a", [False, True])
def test_masked_decode_stretch_equals_pass_by_pass(a2a):
    st = _st(a2a=a2a)
    rng = np.random.default_rng(3)
    ctx = rng.integers(1, 3000, size=40)
    fast = st.decode_stretch_times(ctx, 50)
    ref = np.array([st.pass_time(_decode(ctx + s)) for s in range(50)])
    np.testing.assert_allclose(fast, ref, rtol=1e-12, atol=0)
    ends = st.decode_stretch_ends(ctx, 50, 2.0)
    np.testing.assert_allclose(ends, 2.0 + np.cumsum(ref), rtol=1e-12, atol=0)


def _facts(gpu, tp, ep, dp, dtype="fp4"):
    return PlanInputs(load_model(MODEL), load_gpu(gpu), Layout(tp=tp, ep=ep, attention_dp=dp), dtype, "fp8")


@pytest.mark.parametrize("opts,tp,ep,dp,expected", [
    ({}, 8, 8, 1, False), ({}, 1, 8, 8, False), ({"moe_a2a_backend": "deepep"}, 1, 8, 8, True),
    ({"moe_a2a_backend": "deepep"}, 8, 1, 1, False)])
def test_sglang_dispatch_follows_moe_a2a_backend(opts, tp, ep, dp, expected):
    assert plan_sglang(SGLangOptions(**opts), _facts("b200_sxm", tp, ep, dp)).moe_all_to_all is expected


@pytest.mark.parametrize("opts,tp,ep,dp,expected", [
    ({}, 8, 8, 1, False), ({}, 1, 8, 8, False), ({"all2all_backend": "naive"}, 1, 8, 8, False),
    ({"all2all_backend": "deepep_low_latency"}, 1, 8, 8, True),
    ({"all2all_backend": "deepep_low_latency"}, 8, 8, 1, False)])  # vLLM's all2all kernels need DP
def test_vllm_dispatch_follows_all2all_backend(opts, tp, ep, dp, expected):
    assert plan_vllm(VLLMOptions(**opts), _facts("b200_sxm", tp, ep, dp)).moe_all_to_all is expected


@pytest.mark.parametrize("gpu,opts,tp,ep,dp,expected", [
    ("b200_sxm", {}, 8, 8, 1, False),  # no attention DP: the whole batch on every rank
    ("b200_sxm", {}, 1, 8, 8, True),  # attention DP over NVLink: NVLink all-to-all
    ("b200_sxm", {"moe_alltoall": False}, 1, 8, 8, False),
    ("b200_sxm", {}, 1, 4, 8, False),  # MoE tensor parallelism (moe_tp 2): all-gather
])
def test_trtllm_dispatch(gpu, opts, tp, ep, dp, expected):
    assert plan_trtllm(TRTLLMOptions(**opts), _facts(gpu, tp, ep, dp)).moe_all_to_all is expected


def _deployed_step_time(engine: dict) -> AnalyticStepTime:
    """The analytic step-time model a DeepSeek-V3 deployment on eight B200s builds for ``engine``."""
    from servesim.cluster.deployment import build_deployment
    from servesim.config.load import load_config

    cfg = {"workload": {"kind": "synthetic", "num_requests": 4, "arrival": {"process": "poisson", "rate": 1.0},
                        "input": {"dist": "fixed", "value": 100}, "output": {"dist": "fixed", "value": 10}},
           "deployment": {"model": MODEL, "gpu": "b200", "engine": engine, "tp": 8, "ep": 8,
                          "weight_dtype": "fp4", "kv_dtype": "fp8"},
           "output": {"dir": None}}
    step_time = build_deployment(load_config(cfg)).step_time
    while not isinstance(step_time, AnalyticStepTime):
        step_time = step_time.inner
    return step_time


def test_deployment_passes_the_engines_dispatch_to_the_step_time_model():
    assert not _deployed_step_time({"name": "sglang"}).moe_all_to_all
    assert _deployed_step_time({"name": "sglang", "moe_a2a_backend": "deepep"}).moe_all_to_all


# ------------------------------------------------------------------ the fused MoE's kernel path
def test_trtllm_moe_backend_sets_the_kernel_path_the_pass_prices():
    """TensorRT-LLM's ``moe_config.backend`` picks its fused MoE's kernels; the pass prices the
    routed experts with that path's measured rates: on Blackwell the TRTLLM backend's NVFP4
    kernels (the format's rates) are faster at decode sizes than CUTLASS's (``fp4@cutlass``), as
    TensorRT-LLM's B200 table times them (about half at 8-64 tokens; the fitted rates give 0.73-0.85
    of CUTLASS's time on DeepSeek's experts there)."""
    g = load_gpu("b200_sxm")
    plans = {b: plan_trtllm(TRTLLMOptions(moe_backend=b), _facts("b200_sxm", 8, 8, 1)) for b in
             ("CUTLASS", "TRTLLM", "DEEPGEMM", "TRITON")}
    assert TRTLLMOptions().moe_backend == "CUTLASS"  # TensorRT-LLM's default
    assert [plans[b].moe_kernel for b in ("CUTLASS", "TRTLLM", "DEEPGEMM", "TRITON")] == \
        ["cutlass", "trtllm", "deepgemm", None]
    rates = kernel_rates("trtllm", g)
    assert rates.moe_fixed("fp4", "cutlass") != rates.moe_fixed("fp4")

    def st(kernel):
        return AnalyticStepTime(load_model(MODEL), g, tp=8, ep=8, weight_dtype="fp4", kv_dtype="fp8",
                                kernel_rates=rates, moe_kernel=kernel)

    cutlass, trtllm, default = st("cutlass"), st("trtllm"), st(None)
    for t in (8, 64):
        assert trtllm._moe_time(t) == default._moe_time(t)  # the format's rates describe TRTLLM's kernels
        assert trtllm._moe_time(t) < 0.9 * cutlass._moe_time(t)
    # DeepGEMM's block-fp8 kernels have rates of their own; TRTLLM's block-fp8 kernels, which no
    # table times, keep the op model
    fp8 = {k: AnalyticStepTime(load_model(MODEL), g, tp=8, ep=8, weight_dtype="fp8", kv_dtype="fp8",
                               kernel_rates=rates, moe_kernel=k)._moe_time(64) for k in ("deepgemm", "trtllm")}
    no_rates = AnalyticStepTime(load_model(MODEL), g, tp=8, ep=8, weight_dtype="fp8", kv_dtype="fp8",
                                moe_kernel="trtllm")._moe_time(64)
    assert fp8["trtllm"] == no_rates and fp8["deepgemm"] != no_rates
    # a path the tables do not time for the format takes the format's rates (bf16 has CUTLASS only)
    bf16 = [AnalyticStepTime(load_model(MODEL), g, tp=8, ep=8, weight_dtype="bf16", kv_dtype="fp8",
                             kernel_rates=rates, moe_kernel=k)._moe_time(64) for k in ("cutlass", None)]
    assert bf16[0] == bf16[1]


def test_deployment_passes_the_engines_moe_kernel_to_the_step_time_model():
    assert _deployed_step_time({"name": "trtllm"}).moe_kernel == "cutlass"
    assert _deployed_step_time({"name": "trtllm", "moe_backend": "TRTLLM"}).moe_kernel == "trtllm"
    assert _deployed_step_time({"name": "sglang"}).moe_kernel is None


def test_vllm_mxfp4_marlin_option_runs_gpt_oss_experts_through_marlin():
    """``VLLM_MXFP4_USE_MARLIN=1`` (``mxfp4_use_marlin``) moves MXFP4 experts (gpt-oss) onto vLLM's
    Marlin MoE: Marlin's row blocks and vLLM's Marlin rates (its int4 ones on Hopper), not
    triton_kernels' blocks and rates; other experts' formats keep their path."""
    gpt_oss = PlanInputs(load_model("openai/gpt-oss-120b"), load_gpu("h200_sxm"), Layout(tp=1), "fp4", "bf16")
    assert plan_vllm(VLLMOptions(mxfp4_use_marlin=True), gpt_oss).moe_kernel == "marlin"
    assert plan_vllm(VLLMOptions(), gpt_oss).moe_kernel is None
    assert plan_vllm(VLLMOptions(mxfp4_use_marlin=True), _facts("h200_sxm", 8, 1, 1, "fp8")).moe_kernel is None
    g = load_gpu("h200_sxm")
    rates = kernel_rates("vllm", g)
    assert rates.moe_marlin("mxfp4", "marlin") and not rates.moe_ogs("mxfp4", "marlin")
    assert rates.moe("mxfp4", "marlin") == rates.moe("int4") != rates.moe("mxfp4")

    def moe_ms(kernel, tokens):
        return AnalyticStepTime(load_model("openai/gpt-oss-120b"), g, tp=1, weight_dtype="fp4", kv_dtype="bf16",
                                kernel_rates=rates, moe_kernel=kernel)._moe_time(tokens) * 1e3
    assert moe_ms("marlin", 8192) != moe_ms(None, 8192)


def test_trtllm_triton_backend_prices_hopper_mxfp4_on_triton_kernels_row_blocks():
    """TensorRT-LLM's TRITON MoE backend (what its Hopper gpt-oss scripts select) is the format's own
    path there (triton_kernels' row blocks); its default CUTLASS is another path."""
    gpt_oss = PlanInputs(load_model("openai/gpt-oss-120b"), load_gpu("h200_sxm"), Layout(tp=1), "fp4", "bf16")
    triton = plan_trtllm(TRTLLMOptions(moe_backend="TRITON"), gpt_oss).moe_kernel
    rates = kernel_rates("trtllm", load_gpu("h200_sxm"))
    assert triton is None and rates.moe_ogs("mxfp4", triton)
    assert not rates.moe_ogs("mxfp4", plan_trtllm(TRTLLMOptions(), gpt_oss).moe_kernel)
