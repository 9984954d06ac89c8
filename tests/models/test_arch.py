import json

import pytest

from servesim.errors import ModelError
from servesim.models import ALIASES, bundled_models, load_model, parse_config

CALIBRATION_MODELS = [
    "MiniMaxAI/MiniMax-M2.5", "Qwen/Qwen3-235B-A22B", "Qwen/Qwen3-235B-A22B-FP8", "Qwen/Qwen3-32B",
    "deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-R1-0528", "deepseek-ai/DeepSeek-V3",
    "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-8B-Instruct", "moonshotai/Kimi-K2.5",
    "openai/gpt-oss-120b", "zhipuai/GLM-5", "nvidia/DeepSeek-R1-NVFP4", "nvidia/DeepSeek-V3.1-NVFP4",
    "nvidia/Llama-3.1-8B-Instruct-FP8", "nvidia/Qwen3-32B-NVFP4",
]

TINY = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 256,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
    "max_position_embeddings": 2048,
}


@pytest.mark.parametrize("name", bundled_models() + sorted(ALIASES))
def test_every_bundled_and_alias_loads(name):
    a = load_model(name)
    assert a.num_layers == len(a.layer_kinds) == len(a.moe_layer_mask)
    pc = a.param_count()
    assert 0 < pc.active <= pc.total
    assert a.kv_bytes_per_token(2) > 0


@pytest.mark.parametrize("name", CALIBRATION_MODELS)
def test_calibration_models_resolve(name):
    assert load_model(name).name == name


def test_short_alias_and_case():
    assert load_model("qwen3-32b").config_source == "Qwen/Qwen3-32B"
    assert load_model("DEEPSEEK-R1-0528").num_experts == 256


def test_unknown_model_lists_bundled():
    with pytest.raises(ModelError) as e:
        load_model("acme/NoSuchModel-7B")
    assert "Qwen/Qwen3-32B" in str(e.value)


def test_unsupported_architecture(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**TINY, "model_type": "mamba", "architectures": ["MambaForCausalLM"]}))
    with pytest.raises(ModelError) as e:
        load_model(p)
    assert "supported" in str(e.value) and "llama" in str(e.value)


def test_local_path_file_and_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    a = load_model(tmp_path)
    b = load_model(tmp_path / "config.json")
    assert a.num_layers == b.num_layers == 2 and a.head_dim == 16 and a.num_kv_heads == 2


def test_tiny_param_count_by_hand():
    a = parse_config(TINY, name="tiny")
    h, i, L, V = 64, 256, 2, 1000
    attn = h * 64 + 2 * h * 32 + 64 * h  # q, k+v (2 kv heads × 16), o
    mlp = 3 * h * i
    total = 2 * V * h + L * (attn + mlp) + (2 * L + 1) * h
    assert a.param_count().total == total
    assert a.kv_bytes_per_token(2) == L * 2 * 2 * 16 * 2


def test_published_param_totals():
    assert abs(load_model("meta-llama/Llama-3.1-8B-Instruct").param_count().total / 1e9 - 8.03) < 0.01
    ds = load_model("deepseek-ai/DeepSeek-V3").param_count()
    assert abs(ds.total / 1e9 - 671) < 1.5 and abs(ds.active / 1e9 - 37.5) < 0.6
    assert abs(load_model("openai/gpt-oss-120b").param_count().total / 1e9 - 116.8) < 0.5
    assert abs(load_model("Qwen/Qwen3-235B-A22B").param_count().active / 1e9 - 22) < 0.5
    # published sizes of the models of a vLLM H100 suite: 14.8B, 33.7B (CodeLlama paper: 34B), 69B, 141B / 39B active
    assert abs(load_model("Qwen/Qwen3-14B").param_count().total / 1e9 - 14.8) < 0.05
    assert abs(load_model("codellama/CodeLlama-34b-Instruct-hf").param_count().total / 1e9 - 33.7) < 0.1
    assert abs(load_model("meta-llama/Llama-2-70b-hf").param_count().total / 1e9 - 69.0) < 0.1
    mixtral = load_model("mistralai/Mixtral-8x22B-Instruct-v0.1").param_count()
    assert abs(mixtral.total / 1e9 - 141) < 0.5 and abs(mixtral.active / 1e9 - 39) < 0.5


def test_gqa_kv_bytes_llama8b():
    a = load_model("meta-llama/Llama-3.1-8B-Instruct")
    assert a.kv_bytes_per_token(2) == 2 * 8 * 128 * 32 * 2 == 131072
    assert a.kv_bytes_per_token(2, tp=2) == 131072 / 2
    assert a.kv_bytes_per_token(2, tp=8) == 131072 / 8
    assert a.kv_bytes_per_token(2, tp=16) == 131072 / 8  # 8 kv heads replicated beyond tp=8


def test_mla_kv_bytes_deepseek():
    a = load_model("deepseek-ai/DeepSeek-V3")
    assert a.is_mla and a.kv_bytes_per_token(2) == 576 * 61 * 2
    assert a.kv_bytes_per_token(1, tp=8) == 576 * 61  # latent not split by tp
    assert a.moe_layer_mask[:3] == (False, False, False) and a.num_moe_layers == 58


def test_sliding_window_gpt_oss():
    a = load_model("openai/gpt-oss-120b")
    assert a.sliding_window == 128 and a.num_sliding_layers == a.num_full_layers == 18
    per_layer = 2 * 8 * 64 * 2
    assert a.kv_bytes_for_context(100, 2) == 36 * per_layer * 100
    assert a.kv_bytes_for_context(10_000, 2) == 18 * per_layer * 10_000 + 18 * per_layer * 128


def test_hybrid_linear_state():
    a = load_model("Qwen/Qwen3.5-397B-A17B")
    assert a.num_linear_layers == 45 and a.num_full_layers == 15 and a.layer_kinds[3] == "full"
    ssm = 64 * 128 * 128
    conv = (2 * 16 * 128 + 64 * 128) * 3
    assert a.state_bytes_per_request(2) == 45 * (ssm + conv) * 2
    assert a.kv_bytes_per_token(2) == 15 * 2 * 2 * 256 * 2
    nxt = load_model("Qwen/Qwen3-Next-80B-A3B-Instruct")
    assert nxt.num_linear_layers == 36 and nxt.shared_expert_intermediate_size == 512


def test_glm5_sparse_attention_fields():
    a = load_model("zhipuai/GLM-5")
    assert a.is_mla and a.index_topk == 2048 and a.num_layers == 78


def test_bad_json(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{not json")
    with pytest.raises(ModelError, match="not valid JSON"):
        load_model(p)
