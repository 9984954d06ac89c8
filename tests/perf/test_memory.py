import pytest

from servesim.errors import ModelError
from servesim.hardware import load_gpu
from servesim.models import load_model
from servesim.perf.memory import Layout, kv_capacity_tokens, memory_budget, weights_bytes_per_gpu


def test_llama8b_h100_sglang_by_hand():
    m, g = load_model("meta-llama/Llama-3.1-8B-Instruct"), load_gpu("h100_sxm")
    total = 81559 * 2**20  # nvidia-smi total, 79.65 GiB
    weights = m.param_count().total * 2
    assert weights_bytes_per_gpu(m, "bf16", Layout()) == pytest.approx(weights)
    expected = int((0.9 * total - weights - 1.0e9) // 131072)
    got = kv_capacity_tokens(m, g, Layout(), "bf16", 0.9, engine="sglang", non_torch_gb=1.0)
    assert abs(got - expected) <= 30  # 79.65 GiB is 81559 MiB rounded
    # fp8 KV doubles the tokens; tp=2 halves weights and per-token bytes
    fp8 = kv_capacity_tokens(m, g, Layout(), "fp8", 0.9)
    assert fp8 == pytest.approx(2 * got, rel=1e-6, abs=2)
    assert kv_capacity_tokens(m, g, Layout(tp=2), "bf16", 0.9) > 2 * got


def test_engines_differ_as_documented():
    m, g = load_model("meta-llama/Llama-3.1-8B-Instruct"), load_gpu("h100_sxm")
    s = memory_budget(m, g, Layout(), "bf16", 0.9, engine="sglang")
    v = memory_budget(m, g, Layout(), "bf16", 0.9, engine="vllm")
    t = memory_budget(m, g, Layout(), "bf16", 0.9, engine="trtllm")
    assert v.kv_tokens < s.kv_tokens  # vLLM also reserves activations and graphs
    assert t.kv_bytes == pytest.approx(0.9 * (s.total_bytes - t.weights_bytes - t.reserve_bytes))


def test_does_not_fit_names_gb():
    m, g = load_model("meta-llama/Llama-3.1-405B"), load_gpu("h100_sxm")
    with pytest.raises(ModelError) as e:
        kv_capacity_tokens(m, g, Layout(), "bf16", 0.9)
    msg = str(e.value)
    assert "does not fit" in msg and "GB" in msg
    short = (405.85e9 * 2 + 1e9 - 0.9 * 81559 * 2**20) / 1e9
    assert f"by {short:.0f}" in msg or f"by {short:.1f}" in msg


def test_moe_expert_sharding_and_precision():
    m = load_model("deepseek-ai/DeepSeek-R1")
    w8 = weights_bytes_per_gpu(m, "fp8", Layout(tp=8, ep=8))
    assert 80e9 < w8 < 90e9  # ~671 GB fp8 / 8 plus replicated MLA down-projections
    w4 = weights_bytes_per_gpu(m, "fp4", Layout(tp=8, ep=8))
    assert w4 < 0.65 * w8
    cap = kv_capacity_tokens(m, load_gpu("b200"), Layout(tp=8, ep=8), "fp8", 0.82, weight_dtype="fp4")
    assert cap > 1_000_000


def test_hybrid_and_sliding_reduce_per_token_cost():
    g = load_gpu("h200_sxm")
    q = load_model("Qwen/Qwen3.5-397B-A17B")
    b = memory_budget(q, g, Layout(tp=8, ep=8), "bf16", 0.85, weight_dtype="fp8", max_running_requests=64)
    assert b.state_bytes == pytest.approx(64 * q.state_bytes_per_request(2, 8))
    assert b.kv_bytes_per_token == q.kv_bytes_per_token_full(2, 8)
    o = load_model("openai/gpt-oss-120b")
    b = memory_budget(o, g, Layout(tp=1), "bf16", 0.9, weight_dtype="mxfp4")
    assert b.kv_bytes_per_token == o.kv_bytes_per_token(2) / 2


def test_bad_layout():
    with pytest.raises(ModelError):
        Layout(tp=4, ep=3)
