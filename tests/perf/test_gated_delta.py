"""The chunked gated-delta (linear attention) prefill kernel in the op model: its chains, each
engine's own kernel rates, and agreement with the measured gdn tables of aiconfigurator-core
(skipped when that package is absent)."""

from __future__ import annotations

import numpy as np
import pytest

from servesim.hardware import load_gpu
from servesim.models.arch import load_model
from servesim.perf.analytic import AnalyticStepTime
from servesim.perf.analytic_params import AnalyticParams
from servesim.perf.engine_kernels import NO_RATES, kernel_rates
from servesim.perf.kernels import LINEAR_ATTN_KERNELS, OpModel
from servesim.perf.plan import PassPlan

from benchscripts import load_benchmark

QWEN_NEXT = "Qwen/Qwen3-Next-80B-A3B-Instruct"


def _prefill(ops: OpModel, requests: int, tokens: int, heads: int = 8) -> float:
    return float(ops.gated_delta(requests, tokens, heads, 128, 128, prefill=True))


def test_one_long_sequence_waits_on_its_chains():
    """A sequence passes its state chunk to chunk in order: 32k tokens of one sequence take at
    least 32k chain steps, and the same tokens as eight sequences run their chains side by side."""
    p = AnalyticParams(linear_attn_eff=0.5)  # a tensor-core kernel's math (vLLM's): the chains show
    ops = OpModel(load_gpu("h200_sxm"), p)
    one = _prefill(ops, 1, 32768)
    assert one >= 32768 * p.linear_attn_chain_s
    eight = _prefill(ops, 8, 32768)
    assert eight < 0.25 * one


def test_chains_beyond_the_sms_run_in_waves():
    ops = OpModel(load_gpu("h200_sxm"), AnalyticParams(linear_attn_eff=1.0))  # math never binds here
    sms = load_gpu("h200_sxm").sm_count  # 132: 8 heads a sequence, 16 sequences fill one wave
    assert sms == 132
    one_wave = _prefill(ops, 16, 4096 * 16)
    three_waves = _prefill(ops, 40, 4096 * 40)  # 320 chains
    fixed = LINEAR_ATTN_KERNELS * ops.t_kernel
    assert (three_waves - fixed) == pytest.approx(3 * (one_wave - fixed), rel=1e-9)


def test_decode_keeps_the_recurrent_form():
    """The chain term is the chunked kernel's; a decode step's recurrent update has none."""
    ops = OpModel(load_gpu("h200_sxm"), AnalyticParams(linear_attn_chain_s=1.0))  # absurd chain latency
    assert float(ops.gated_delta(64, 64, 8, prefill=False)) < 1e-3


def test_vllm_runs_the_math_on_tensor_cores():
    """vLLM 0.24's FlashInfer gated-delta prefill measures several times the FLA-style rate of the
    op model's default; SGLang's and TensorRT-LLM's kernels stay near it."""
    for gpu in ("h200_sxm", "b200_sxm"):
        g = load_gpu(gpu)
        assert kernel_rates("vllm", g).linear_attn() > 3.0
        assert kernel_rates("sglang", g).linear_attn() < 1.5
        assert kernel_rates("trtllm", g).linear_attn() < 2.0
        assert 0.5 < kernel_rates("vllm", g).linear_attn_chain() < 1.5
    assert NO_RATES.linear_attn() == NO_RATES.linear_attn_chain() == NO_RATES.linear_attn_fixed() == 1.0


def _pass(st: AnalyticStepTime, chunks: list[int]) -> float:
    n = len(chunks)
    return st.pass_time(PassPlan(prefill_new=np.asarray(chunks, dtype=np.int64),
                                 prefill_cached=np.zeros(n, dtype=np.int64)))


def test_a_pass_pays_for_its_longest_chunk():
    """In a pass, a hybrid model's linear layers wait on the longest prefill chunk's chains: one
    16k chunk costs more than two 8k chunks of the same tokens, by at least the chain time saved."""
    arch = load_model(QWEN_NEXT)
    p = AnalyticParams()
    st = AnalyticStepTime(arch, load_gpu("h200_sxm"), tp=4, params=p, kernel_rates=kernel_rates("vllm", load_gpu("h200_sxm")))
    one, two = _pass(st, [16384]), _pass(st, [8192, 8192])
    chains = arch.num_linear_layers * 8192 * p.linear_attn_chain_s * kernel_rates("vllm", load_gpu("h200_sxm")).linear_attn_chain()
    assert one - two >= 0.5 * chains
    assert st._lin_prefill([16384]) == pytest.approx(one - st._prefill_attn([16384], [0]) - st._token_part(16384, 1, 0, 1, False))


#: Median |error| per engine of the fitted kernel on the context rows of its gdn tables (the fit
#: reaches 6-17%; before the chain term and the engines' rates, 22-96%).
GDN_BOUND = 0.2


def test_gdn_prefill_matches_the_measured_tables_per_engine():
    pytest.importorskip("aiconfigurator_core")
    pytest.importorskip("pyarrow")
    bk = load_benchmark("bench_kernels")
    records = bk.collect(200, tables=("gdn_perf",), systems=("h100_sxm", "h200_sxm", "b200_sxm"))
    summary = bk.summarise(records, key=("cls", "backend"))
    for engine in ("sglang", "trtllm", "vllm"):
        got = summary[f"gdn/context|{engine}"]
        assert got["count"] >= 200, engine
        assert got["median_abs"] <= GDN_BOUND and abs(got["median_signed"]) <= 0.1, (engine, got)
