"""A checkpoint's weight precision, read from its ``config.json`` ``quantization_config``.

Hugging Face configs of quantized checkpoints say how their weights are stored; servesim
reads that so a deployment of, e.g., DeepSeek-V3 (shipped in FP8) does not default to bf16
weights and run out of memory.  The value is a ``deployment.weight_dtype`` name:

- ``quant_method: fp8`` (DeepSeek-V3, MiniMax-M2.5: 128×128 block scales) → ``fp8``;
- ``quant_method: mxfp4`` (gpt-oss: MoE experts in MXFP4) → ``fp4`` (gpt-oss reads ``fp4`` as
  MXFP4 on the experts, see ``perf/precision.py``);
- ``quant_method: modelopt`` → ``fp8`` or ``fp4`` from its ``quant_algo``;
- ``quant_method: compressed-tensors`` → from the first config group's weights:
  4-bit integers (Kimi-K2.5) → ``int4``, 4-bit floats → ``fp4``, 8-bit floats → ``fp8``.

Anything else (or no ``quantization_config``) gives ``""``: the weights are taken as bf16.
"""

from __future__ import annotations

from typing import Any


def weight_dtype_of(quantization_config: Any) -> str:
    """``deployment.weight_dtype`` implied by a ``quantization_config`` mapping, or ``""``."""
    if not isinstance(quantization_config, dict):
        return ""
    method = str(quantization_config.get("quant_method", "")).lower()
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8"
    if method == "mxfp4":
        return "fp4"
    if method == "modelopt":
        algo = str(quantization_config.get("quant_algo", "")).upper()
        return "fp4" if "FP4" in algo else "fp8" if "FP8" in algo else ""
    if method == "compressed-tensors":
        return _compressed_tensors_dtype(quantization_config)
    return ""


def fp8_block_scaled(quantization_config: Any) -> bool:
    """Whether an fp8 ``quantization_config`` scales its weights per block (``weight_block_size``:
    DeepSeek-V3, MiniMax-M2.5, Qwen's FP8 releases) rather than per tensor."""
    return weight_dtype_of(quantization_config) == "fp8" and bool(quantization_config.get("weight_block_size"))


def _compressed_tensors_dtype(qc: dict) -> str:
    groups = qc.get("config_groups") or {}
    for group in groups.values() if isinstance(groups, dict) else ():
        weights = (group or {}).get("weights") or {}
        bits, kind = weights.get("num_bits"), str(weights.get("type", "")).lower()
        if bits == 4:
            return "int4" if kind == "int" else "fp4"
        if bits == 8 and kind == "float":
            return "fp8"
    fmt = str(qc.get("format", "")).lower()
    return "fp4" if "nvfp4" in fmt else ""
