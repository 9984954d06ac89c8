"""Numeric formats: bytes per weight / KV element, and which compute peak a format runs at.

Weight formats (bytes per parameter include block-scale overhead):

- ``bf16``/``fp16``: 2;  ``fp8``: 1 (128×128 block scales negligible);  ``int8``: 1;
- ``nvfp4`` (alias ``fp4`` on NVIDIA): 4-bit values + one fp8 scale per 16 → 0.5625;
- ``mxfp4``: 4-bit values + one 8-bit scale per 32 → 0.53125;
- ``int4``: weight-only 4-bit, bf16 scale per group of 32 (Kimi-K2.5 / Marlin style) → 0.5625;
- ``int8_wo``: weight-only int8 (W8A16, per-channel scales), multiplied at the bf16 peak — ``int8``
  is W8A8 (SmoothQuant-style, int8 tensor cores).

Which layers a checkpoint quantizes (:func:`layer_dtypes`):

- ``fp8``, ``int8``: every linear layer;
- ``fp4``/``nvfp4`` on a dense model: every linear layer; on a MoE model: every MLP (routed
  and shared experts, dense layers) in fp4, attention in bf16.  NVIDIA's ModelOpt NVFP4 MoE
  checkpoints list every ``self_attn`` module in their ``exclude_modules`` (``hf_quant_config.json``
  of nvidia/DeepSeek-R1-0528-NVFP4, nvidia/MiniMax-M2.5-NVFP4, nvidia/GLM-4.7-NVFP4; the
  ``ignore`` list in Inferact/Kimi-K2.5-NVFP4's ``config.json``), so attention runs from bf16 weights.
  NVIDIA's later DeepSeek exports quantize MLA's output projection too (:func:`fp4_output_projection`:
  ``attention_out`` in fp4, the other projections bf16);
- ``mxfp4`` (gpt-oss) and ``int4`` (Kimi): routed experts only (dense models: the MLP),
  the rest bf16; gpt-oss given ``fp4`` is read as ``mxfp4``.

Embeddings and LM head stay bf16.  Compute runs at the format's peak where the GPU has
one (fp8/fp4 tensor cores); weight-only formats (``int4``, and 4-bit formats on GPUs
without fp4 units) run at the bf16 peak (``compute_precision``).
"""

from __future__ import annotations

from servesim.errors import ModelError

WEIGHT_BYTES: dict[str, float] = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int8_wo": 1.0,
    "fp4": 0.5625,
    "nvfp4": 0.5625,
    "mxfp4": 0.53125,
    "int4": 0.5625,
}

KV_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "auto": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}

_COMPUTE = {
    "bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "int8": "int8",
    "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4", "int4": None, "int8_wo": None,
}


def weight_bytes(dtype: str) -> float:
    try:
        return WEIGHT_BYTES[dtype.lower()]
    except KeyError:
        raise ModelError(f"unknown weight precision {dtype!r}; expected one of {sorted(WEIGHT_BYTES)}") from None


def kv_bytes(dtype: str) -> float:
    try:
        return KV_BYTES[dtype.lower()]
    except KeyError:
        raise ModelError(f"unknown KV cache dtype {dtype!r}; expected one of {sorted(KV_BYTES)}") from None


def compute_precision(dtype: str, gpu) -> str:
    """Tensor-core precision a GEMM with ``dtype`` weights runs at on ``gpu``."""
    c = _COMPUTE.get(dtype.lower())
    if c is None or not gpu.supports(c):
        return "bf16"  # weight-only quantization: dequantize, multiply in bf16
    return c


#: Weight formats that need the GPU's own tensor-core precision: without it no kernel runs them
#: natively (NVFP4 needs Blackwell's fp4 units).  Formats not listed run weight-only anywhere.
NEEDS_UNITS = {"fp4": "fp4", "nvfp4": "fp4"}


def check_weight_precision(weight_dtype: str, gpu, family: str = "") -> str | None:
    """Why ``gpu`` cannot run ``weight_dtype`` weights, listing what it supports; None if it can.

    gpt-oss's ``fp4`` is MXFP4, which runs weight-only (dequantised to bf16) on GPUs without
    fp4 units, as vLLM's and SGLang's gpt-oss kernels do on Hopper.
    """
    w = weight_dtype.lower()
    unit = NEEDS_UNITS.get(w)
    if unit is None or gpu.supports(unit) or (family == "gpt_oss" and w == "fp4"):
        return None
    native = [p for p in ("bf16", "fp16", "fp8", "int8", "fp4") if gpu.supports(p)]
    weight_only = sorted(set(WEIGHT_BYTES) - set(NEEDS_UNITS) - {"nvfp4", "mxfp4"} - set(native))
    return (f"{weight_dtype} weights need fp4 tensor cores, which {gpu.name} does not have (it runs "
            f"{', '.join(native)} natively, and {', '.join(weight_only)} weight-only); choose one of those, "
            "or a GPU with fp4 units (NVIDIA Blackwell: b200_sxm, b300_sxm, gb200, gb300)")


#: NVIDIA's NVFP4 DeepSeek exports that keep MLA's output projection (``o_proj``) in fp4: their
#: ``hf_quant_config.json`` excludes only ``q_a_proj``, ``q_b_proj``, ``kv_a_proj_with_mqa`` and
#: ``kv_b_proj`` of each layer (nvidia/DeepSeek-V3.1-NVFP4's and -V3.2-NVFP4's, as shipped with
#: aiconfigurator-core under ``model_configs/``; DeepSeek-R1-0528-FP4-v2's model card: the v2 export
#: "additionally quantizes wo").  The earlier exports (nvidia/DeepSeek-R1-FP4, -R1-NVFP4,
#: -R1-0528-NVFP4, -V3-0324-FP4) and NVIDIA's Kimi and GLM exports keep all of attention in bf16.
FP4_O_PROJ_CHECKPOINTS = frozenset(n.lower() for n in (
    "nvidia/DeepSeek-R1-0528-FP4-v2", "nvidia/DeepSeek-V3.1-NVFP4", "nvidia/DeepSeek-V3.2-NVFP4"))
#: DeepSeek's own names, which at ``fp4`` on an NVIDIA GPU mean NVIDIA's current export,
#: nvidia/DeepSeek-R1-0528-FP4-v2: InferenceX's launchers load it for every DeepSeek fp4 benchmark,
#: whose rows record deepseek-ai/DeepSeek-R1-0528, -R1 or -V3.  (AMD GPUs load AMD's MXFP4 export.)
FP4_UPSTREAM_NAMES = frozenset(n.lower() for n in (
    "deepseek-ai/DeepSeek-R1-0528", "deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3"))


def fp4_output_projection(model_name: str, weight_dtype: str, vendor: str = "nvidia") -> bool:
    """Whether a deployment of ``model_name`` at ``weight_dtype`` on a GPU of ``vendor`` runs MLA's
    output projection from fp4 weights (:data:`FP4_O_PROJ_CHECKPOINTS`, :data:`FP4_UPSTREAM_NAMES`)."""
    if weight_dtype.lower() not in ("fp4", "nvfp4"):
        return False
    name = (model_name or "").lower()
    return name in FP4_O_PROJ_CHECKPOINTS or (vendor == "nvidia" and name in FP4_UPSTREAM_NAMES)


def layer_dtypes(weight_dtype: str, family: str = "", is_moe: bool = False,
                 fp4_o_proj: bool = False) -> dict[str, str]:
    """Precision per weight category: attention (``attention_out``: its output projection),
    dense_mlp, shared_experts, routed_experts, embed.  ``fp4_o_proj``: the checkpoint keeps the
    output projection of an fp4 MoE model in fp4 (:func:`fp4_output_projection`)."""
    w = weight_dtype.lower()
    weight_bytes(w)  # validates
    if family == "gpt_oss" and w in ("fp4", "nvfp4"):
        w = "mxfp4"
    rest = w
    attention = w
    if w in ("mxfp4", "int4"):
        rest = attention = "bf16"
    elif w in ("fp4", "nvfp4") and is_moe:
        attention = "bf16"  # ModelOpt MoE exports exclude self_attn (module docstring)
    dense_mlp = rest if is_moe else w
    return {
        "attention": attention,
        "attention_out": w if fp4_o_proj and w in ("fp4", "nvfp4") else attention,
        "linear_attention": attention,
        "dense_mlp": dense_mlp,
        "shared_experts": rest,
        "routed_experts": w,
        "router": "bf16",
        "embed": "bf16",
        "lm_head": "bf16",
        "norms": "bf16",
    }
