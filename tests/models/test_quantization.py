"""A checkpoint's quantization_config sets the default weight precision (deployment.weight_dtype)."""

import pytest

from servesim.cluster.deployment import infer_weight_dtype
from servesim.models.arch import load_model
from servesim.models.quantization import fp8_block_scaled, weight_dtype_of


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


@pytest.mark.parametrize("name, block", [
    ("deepseek-ai/DeepSeek-V3", True),  # its config: quant_method fp8, weight_block_size [128, 128]
    ("MiniMaxAI/MiniMax-M2.5", True),
    ("Qwen/Qwen3-235B-A22B-FP8", True),  # Qwen's FP8 release of a bundled bf16 config
    ("Qwen/Qwen3-32B", False),  # bf16 config: an fp8 deployment of it is per-tensor (ModelOpt)
    ("nvidia/Llama-3.1-70B-Instruct-FP8", False),
    ("openai/gpt-oss-120b", False),
])
def test_block_scaled_fp8_checkpoints(name, block):
    """Block-scaled fp8 is read from the config's weight_block_size, or from the name of a
    block-scaled release of a bundled bf16 config; anything else fp8 is per-tensor."""
    assert load_model(name).fp8_block_scales is block
    assert fp8_block_scaled({"quant_method": "fp8", "weight_block_size": [128, 128]})
    assert not fp8_block_scaled({"quant_method": "fp8"})
    assert not fp8_block_scaled({"quant_method": "modelopt", "quant_algo": "FP8"})
    assert not fp8_block_scaled(None)
