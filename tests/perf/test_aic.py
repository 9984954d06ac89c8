"""perf.model aic: passes priced from aiconfigurator-core's measured operator tables."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from servesim.errors import ConfigError
from servesim.hardware import load_gpu
from servesim.models import load_model
from servesim.perf.aic import bucket, bucket_array, import_core
from servesim.perf.config import AicPerfConfig, build_step_time, parse_perf_config
from servesim.perf.plan import PassPlan, stretch_by_steps

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


# ------------------------------------------------------------ without the package
def test_missing_package_says_how_to_install(monkeypatch):
    for name in ("aiconfigurator_core", "aiconfigurator_core.sdk"):
        monkeypatch.setitem(sys.modules, name, None)  # `import` of a None entry raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'servesim\[aic\]'"):
        import_core()
    with pytest.raises(ConfigError, match=r"aiconfigurator-core.*pip install 'servesim\[aic\]'"):
        build_step_time({"model": "aic"}, load_model(LLAMA), load_gpu("h100_sxm"), engine="sglang")


def test_perf_config_selects_aic_and_rejects_unknown_keys():
    cfg = parse_perf_config({"model": "aic", "aic": {"backend_version": "0.5.14"}})
    assert isinstance(cfg, AicPerfConfig) and cfg.aic.backend_version == "0.5.14"
    assert parse_perf_config({"model": "aic"}).aic.backend_version == "current"
    with pytest.raises(ConfigError, match=r"perf\.aic\.bogus"):
        parse_perf_config({"model": "aic", "aic": {"bogus": 1}})


def test_bucket_is_exact_then_six_significant_bits():
    assert [bucket(n) for n in (1, 64)] == [1, 64]
    assert bucket(1000) == 992 and bucket(1010) == 1008  # step 16 between 512 and 1023
    assert bucket(100_000) == 100_352  # step 2048 (within 1.6 %)
    ns = np.arange(1, 20_000)
    b = bucket_array(ns)
    assert b.tolist() == [bucket(int(n)) for n in ns]
    assert np.all(np.diff(b) >= 0) and np.max(np.abs(b - ns) / ns) <= 1 / 64


# ------------------------------------------------------------ with the package
@pytest.fixture(scope="module")
def st():
    pytest.importorskip("aiconfigurator_core")
    return build_step_time({"model": "aic"}, load_model(LLAMA), load_gpu("h100_sxm"), engine="sglang")


def _dec(ctx) -> PassPlan:
    return PassPlan(decode_ctx=np.asarray(ctx, dtype=np.int64))


def _pre(new, cached, ctx=()) -> PassPlan:
    return PassPlan(prefill_new=np.asarray(new, dtype=np.int64), prefill_cached=np.asarray(cached, dtype=np.int64),
                    decode_ctx=np.asarray(ctx, dtype=np.int64))


def test_selects_the_tables_of_the_deployment(st):
    d = st.describe()
    assert (d["system"], d["backend"], d["backend_version"]) == ("h100_sxm", "sglang", "0.5.14")
    assert d["quant_modes"] == {"gemm": "bfloat16", "moe": "bfloat16", "kv": "bfloat16", "fmha": "bfloat16"}


@pytest.mark.parametrize("model, engine, expect", [
    ("Qwen/Qwen3-8B", "sglang", {"gemm": "fp8_block", "kv": "fp8", "fmha": "fp8"}),  # block-scaled FP8
    ("Qwen/Qwen3-8B", "vllm", {"gemm": "fp8_block", "kv": "fp8", "fmha": "bfloat16"}),  # only bf16 FMHA measured
    (LLAMA, "sglang", {"gemm": "fp8", "kv": "fp8", "fmha": "fp8"}),  # ModelOpt per-tensor FP8
])
def test_fp8_quant_modes_follow_the_checkpoint_and_the_measured_slices(model, engine, expect):
    pytest.importorskip("aiconfigurator_core")
    st = build_step_time({"model": "aic"}, load_model(model), load_gpu("h200_sxm"), weight_dtype="fp8",
                         kv_dtype="fp8", engine=engine)
    assert {k: st.modes[k] for k in expect} == expect


def test_pass_time_positive_and_monotone(st):
    t = st.pass_time
    assert 0 < t(_dec([2000] * 8)) < t(_dec([2000] * 64)) < t(_dec([2000] * 256))
    assert t(_dec([1000] * 32)) < t(_dec([4000] * 32)) < t(_dec([16000] * 32))
    assert 0 < t(_pre([512], [0])) < t(_pre([2048], [0])) < t(_pre([8192], [0]))
    assert t(_pre([2048], [0])) < t(_pre([2048], [8192]))  # a cached prefix is attended to
    assert t(_pre([2048], [0])) < t(_pre([2048], [0], [1000] * 64))  # decode requests ride along
    assert t(PassPlan()) == 0.0


def test_decode_batch_is_priced_from_each_requests_own_context(st):
    """Σ_i T(B, s_i) / B: equal mean context, different spreads → different, hand-composed prices."""
    narrow, wide = [500, 1500] * 32, [100, 1900] * 32
    base = st._tokens(False, 64) + st._logits(64)
    for ctx in (narrow, wide):
        lo, hi = ctx[0], ctx[1]
        expect = base + (32 * st._decode_seq(64, bucket(lo)) + 32 * st._decode_seq(64, bucket(hi))) / 64
        assert st.pass_time(_dec(ctx)) == pytest.approx(expect, rel=1e-12)
    mean_only = st.pass_time(_dec([1000] * 64))
    priced = {st.pass_time(_dec(narrow)), st.pass_time(_dec(wide)), mean_only}
    assert len(priced) == 3  # the tables are not linear in context: the spread matters


def test_prefill_chunks_are_priced_one_by_one(st):
    two = st.pass_time(_pre([1024, 1024], [0, 4096]))
    expect = (st._tokens(True, 2048) + st._logits(2)
              + st._prefill_seq(1024, 0) + st._prefill_seq(1024, 4096))
    assert two == pytest.approx(expect, rel=1e-12)


def test_uniform_passes_match_the_packages_own_step_api(st):
    """For one-context batches the composition equals aiconfigurator-core's whole-step estimate."""
    from aiconfigurator_core.sdk.engine import EngineHandle

    from servesim.perf.aic import _config_dir

    m = st.modes
    pkg = EngineHandle.compile(_config_dir(load_model(LLAMA)), st.system, st.backend, backend_version=st.version,
                               gemm_quant_mode=m["gemm"], moe_quant_mode=m["moe"], kvcache_quant_mode=m["kv"],
                               fmha_quant_mode=m["fmha"])
    for batch, isl in ((4, 1024), (64, 1024), (128, 8192)):
        ours = st.pass_time(_dec([isl + 1] * batch)) * 1e3
        assert ours == pytest.approx(pkg.decode_step_latency(batch, isl, 2), rel=2e-3)  # bucketing only
    for isl in (1024, 8192):
        ours = st.pass_time(_pre([isl], [0])) * 1e3
        assert ours == pytest.approx(pkg.predict_prefill_latency(1, isl, 0), rel=1e-9)


def test_decode_stretch_equals_pass_by_pass(st):
    ctx = np.array([37, 900, 4100, 12000, 63, 64, 65])
    got = st.decode_stretch_times(ctx, 40)
    assert np.array_equal(got, stretch_by_steps(st, ctx, 40))
    assert np.all(got > 0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(gpu="mi300x"), r"deployment\.gpu: 'mi300x'.*available: .*h200_sxm"),
    (dict(engine="dynamo"), r"deployment\.engine\.name: 'dynamo'.*sglang, trtllm, vllm"),
    (dict(version="9.9.9"), r"perf\.aic\.backend_version: '9\.9\.9'.*available: current=0\.5\.14"),
    (dict(weight_dtype="nvfp4"), r"perf\.aic\.gemm_quant_mode.*'nvfp4'.*available: .*bfloat16"),
    (dict(model="Qwen/Qwen3-Next-80B-A3B-Instruct"), r"model: .*Qwen3-Next.*supported architectures"),
    (dict(attention_dp=2), r"deployment\.attention_dp"),
    (dict(aic={"kv_quant_mode": "fp6"}), r"perf\.aic\.kv_quant_mode: unknown quant mode 'fp6'.*bfloat16, int8, fp8"),
])
def test_missing_combination_is_a_clear_error(kwargs, match):
    pytest.importorskip("aiconfigurator_core")
    perf = {"model": "aic", "aic": {"backend_version": kwargs.get("version", "current"), **kwargs.get("aic", {})}}
    with pytest.raises(ConfigError, match=match):
        build_step_time(perf, load_model(kwargs.get("model", LLAMA)), load_gpu(kwargs.get("gpu", "h100_sxm")),
                        weight_dtype=kwargs.get("weight_dtype", "bf16"), engine=kwargs.get("engine", "sglang"),
                        attention_dp=kwargs.get("attention_dp", 1))


def test_predict_end_to_end_with_aic():
    pytest.importorskip("aiconfigurator_core")
    from servesim.api import predict

    cfg = {"seed": 0,
           "workload": {"kind": "closed_loop", "recipe": "fixed", "concurrency": 4, "isl": 800, "osl": 16,
                        "num_prompts": 12, "warmup": 0},
           "deployment": {"model": LLAMA, "gpu": "h100_sxm", "engine": "sglang"},
           "perf": {"model": "aic"}, "output": {"dir": None}}
    summary = predict(cfg).summary
    assert summary["requests"]["completed"] == 12
    assert summary["latency"]["ttft_ms"]["mean"] > 0
