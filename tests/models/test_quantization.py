"""A checkpoint's quantization_config sets the default weight precision (deployment.weight_dtype)."""

import pytest

from servesim.cluster.deployment import infer_weight_dtype
from servesim.models.arch import load_model
from servesim.models.quantization import weight_dtype_of


@pytest.mark.parametrize("qc, expected", [
    ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}, "fp8"),
    ({"quant_method": "mxfp4"}, "fp4"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "fp4"),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8"),
    ({"quant_method": "compressed-tensors",
      "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}}}, "int4"),
    ({"quant_method": "compressed-tensors",
      "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}}}, "fp8"),
    ({"quant_method": "gptq", "bits": 4}, ""),  # not modelled: bf16
    (None, ""),
])
def test_weight_dtype_of(qc, expected):
    assert weight_dtype_of(qc) == expected


@pytest.mark.parametrize("name, expected", [
    ("deepseek-ai/DeepSeek-V3", "fp8"),
    ("deepseek-ai/DeepSeek-R1", "fp8"),  # alias: same checkpoint format
    ("nvidia/DeepSeek-R1-NVFP4", "fp4"),  # the name wins over the bundled config
    ("nvidia/DeepSeek-R1-0528-FP4-v2", "fp4"),
    ("openai/gpt-oss-120b", "fp4"),
    ("moonshotai/Kimi-K2.5", "int4"),
    ("MiniMaxAI/MiniMax-M2.5", "fp8"),
    ("meta-llama/Llama-3.1-8B-Instruct", "bf16"),
    ("Qwen/Qwen3-32B-FP8", "fp8"),
])
def test_default_weight_dtype_follows_the_checkpoint(name, expected):
    assert infer_weight_dtype(name, load_model(name)) == expected


def test_deepseek_v3_fits_eight_h200_by_default():
    """Out of the box (no weight_dtype) DeepSeek-V3 fits 8 × H200 in its FP8; forced bf16 it does
    not, and the error names the key that fixes it."""
    import servesim
    from servesim.errors import ServesimError

    base = {"deployment": {"model": "deepseek-ai/DeepSeek-V3", "gpu": "h200_sxm", "tp": 8, "workers": 1},
            "workload": {"kind": "synthetic", "num_requests": 4,
                         "arrival": {"process": "poisson", "rate": 2.0},
                         "input": {"dist": "fixed", "value": 64}, "output": {"dist": "fixed", "value": 4}},
            "output": {"dir": None}}
    pred = servesim.predict(base)
    assert pred.deployment.describe()["weight_dtype"] == "fp8"
    base["deployment"]["weight_dtype"] = "bf16"
    with pytest.raises(ServesimError, match=r"deployment\.weight_dtype, now bf16"):
        servesim.predict(base)
