"""KV precision when the config leaves it unset: the engine's own "auto" choice."""

from __future__ import annotations

import pytest

from servesim.cluster.deployment import default_kv_dtype
from servesim.hardware import load_gpu
from servesim.models import load_model


@pytest.mark.parametrize("model,gpu,engine,want", [
    ("zai-org/GLM-5", "b200_sxm", "sglang", "fp8"),      # sparse attention on Blackwell: fp8
    ("zai-org/GLM-5", "b300_sxm", "sglang", "fp8"),
    ("zai-org/GLM-5", "h200_sxm", "sglang", "bf16"),     # Hopper: bf16
    ("zai-org/GLM-5", "b200_sxm", "vllm", "bf16"),       # only SGLang's rule
    ("deepseek-ai/DeepSeek-V3", "b200_sxm", "sglang", "bf16"),  # no indexer: bf16
    ("zai-org/GLM-5", "mi355x", "sglang", "bf16"),       # not CUDA
])
def test_default_kv_dtype_follows_the_engine(model, gpu, engine, want):
    assert default_kv_dtype(engine, load_model(model), load_gpu(gpu)) == want


@pytest.mark.parametrize("gpu,page", [("b200_sxm", 64), ("h200_sxm", 64), ("mi355x", 1)])
def test_sglang_uses_64_token_pages_for_sparse_attention_on_cuda(gpu, page):
    from servesim.cluster.deployment import build_deployment
    from servesim.config import load_config

    cfg = load_config({"workload": {"kind": "closed_loop", "recipe": "fixed", "concurrency": 1, "num_prompts": 1,
                                    "isl": 64, "osl": 4},
                       "deployment": {"model": "zai-org/GLM-5", "gpu": gpu, "tp": 8, "weight_dtype": "fp8",
                                      "engine": {"name": "sglang"}},
                       "output": {"dir": None}})
    assert build_deployment(cfg).describe()["engine_settings"]["page_size"] == page
