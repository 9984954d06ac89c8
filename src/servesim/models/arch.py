"""Model architecture read from a Hugging Face ``config.json``.

:class:`ModelArch` holds the shapes a step-time or memory model needs, in one vocabulary
for every family (dense GQA, MoE, MLA, sliding-window, hybrid linear attention).
:func:`load_model` resolves a Hugging Face id, a short alias or a local path.

Layer kinds (``ModelArch.layer_kinds``, one per decoder layer):

- ``"full"``: softmax attention over the whole context (GQA or MLA);
- ``"sliding"``: softmax attention over the last ``sliding_window`` tokens (gpt-oss);
- ``"linear"``: linear attention / gated DeltaNet with a fixed-size recurrent state per
  request (Qwen3-Next, Qwen3.5); no per-token KV.

DeepSeek sparse attention (GLM-5, DeepSeek-V3.2) is kept as ``"full"`` MLA layers with
``index_topk`` > 0: each token attends to at most ``index_topk`` selected tokens, while a
light indexer scores the whole context.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from servesim.errors import ModelError, did_you_mean
from servesim.models.quantization import fp8_block_scaled, weight_dtype_of

#: model_type values understood by the parser, by how they are read.
SUPPORTED_MODEL_TYPES: dict[str, str] = {
    "llama": "dense GQA",
    "mistral": "dense GQA",
    "qwen2": "dense GQA",
    "qwen3": "dense GQA",
    "mixtral": "MoE GQA",
    "qwen2_moe": "MoE GQA",
    "qwen3_moe": "MoE GQA",
    "minimax_m2": "MoE GQA",
    "glm4_moe": "MoE GQA",
    "gpt_oss": "MoE GQA, alternating sliding/full attention",
    "deepseek_v2": "MoE MLA",
    "deepseek_v3": "MoE MLA",
    "kimi_k2": "MoE MLA",
    "kimi_k25": "MoE MLA (text_config)",
    "deepseek_v32": "MoE MLA + sparse attention indexer",
    "glm_moe_dsa": "MoE MLA + sparse attention indexer",
    "qwen3_next": "MoE hybrid linear/full attention",
    "qwen3_5_moe": "MoE hybrid linear/full attention (text_config)",
    "qwen3_5": "dense hybrid linear/full attention (text_config)",
}

#: ``architectures[0]`` values mapped to a model_type when ``model_type`` is missing.
SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "MiniMaxM2ForCausalLM": "minimax_m2",
    "Glm4MoeForCausalLM": "glm4_moe",
    "GptOssForCausalLM": "gpt_oss",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "KimiK25ForConditionalGeneration": "kimi_k25",
    "DeepseekV32ForCausalLM": "deepseek_v32",
    "GlmMoeDsaForCausalLM": "glm_moe_dsa",
    "Qwen3NextForCausalLM": "qwen3_next",
    "Qwen3_5MoeForConditionalGeneration": "qwen3_5_moe",
    "Qwen3_5ForConditionalGeneration": "qwen3_5",
}

_MLA_TYPES = {"deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25", "deepseek_v32", "glm_moe_dsa"}
_HYBRID_LINEAR_TYPES = {"qwen3_next", "qwen3_5_moe", "qwen3_5"}


@dataclass(frozen=True, slots=True)
class ParamCount:
    """Parameter counts: ``total`` stored, ``active`` used per token (one routed top-k)."""

    total: int
    active: int
    #: total by category: embed, lm_head, attention, linear_attention, dense_mlp,
    #: routed_experts, shared_experts, router, norms.
    by_category: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelArch:
    """Shapes of a decoder-only transformer (see module docstring for layer kinds)."""

    name: str
    family: str  # HF model_type
    architecture: str  # HF architectures[0]
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense MLP width (dense layers of MoE models too)
    vocab_size: int
    tie_embeddings: bool = False
    max_position_embeddings: int = 0
    attn_output_gate: bool = False  # Qwen3-Next / Qwen3.5 gated attention (q proj doubled)
    #: The q and k RMS norms run over every head's elements at once (MiniMax-M2's
    #: ``qk_norm_type: per_layer``), not per head: under tensor parallelism each attention
    #: layer all-reduces the per-token sums of squares across the ranks.
    qk_norm_across_heads: bool = False
    # --- MoE (num_experts == 0: dense) ---
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0  # total width of all shared experts
    first_k_dense_replace: int = 0
    #: per layer: True where the MLP is a MoE block.
    moe_layer_mask: tuple[bool, ...] = ()
    # --- MLA (kv_lora_rank == 0: not MLA) ---
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # --- DeepSeek sparse attention indexer (index_topk == 0: none) ---
    index_topk: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    # --- layer kinds ---
    layer_kinds: tuple[str, ...] = ()
    sliding_window: int = 0
    # --- linear attention (gated DeltaNet) ---
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    #: multi-token-prediction layers in the checkpoint (not counted; loaded only for MTP).
    num_mtp_layers: int = 0
    #: bundled config this arch was read from (HF id), or the local path.
    config_source: str = ""
    #: Weight precision of the checkpoint from its ``quantization_config`` (models/quantization.py);
    #: "" when the config has none (bf16 weights).
    quantization: str = ""
    #: Whether the checkpoint's fp8 is block-scaled (128-wide groups, quantized per token group at
    #: run time: DeepSeek's, Qwen's FP8 releases) rather than per-tensor with static input scales
    #: (NVIDIA's ModelOpt exports, and servesim's reading of an fp8 deployment of a bf16 config).
    fp8_block_scales: bool = False

    # ------------------------------------------------------------------ kinds
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def num_moe_layers(self) -> int:
        return sum(self.moe_layer_mask)

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    def count_layers(self, kind: str) -> int:
        return sum(1 for k in self.layer_kinds if k == kind)

    @property
    def num_full_layers(self) -> int:
        return self.count_layers("full")

    @property
    def num_sliding_layers(self) -> int:
        return self.count_layers("sliding")

    @property
    def num_linear_layers(self) -> int:
        return self.count_layers("linear")

    # ------------------------------------------------------------ parameters
    def attention_params_per_layer(self) -> int:
        """Weights of one softmax-attention block (projections, no norms)."""
        h, nq = self.hidden_size, self.num_attention_heads
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank * nq * qk
            else:
                q = h * nq * qk
            kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim)
            kv_b = self.kv_lora_rank * nq * (self.qk_nope_head_dim + self.v_head_dim)
            o = nq * self.v_head_dim * h
            idx = 0
            if self.index_topk:
                qr = self.q_lora_rank or h
                idx = (qr * self.index_n_heads * self.index_head_dim + h * self.index_head_dim
                       + h * self.index_n_heads)
            return q + kv_a + kv_b + o + idx
        hd = self.head_dim
        q = h * nq * hd * (2 if self.attn_output_gate else 1)
        kv = 2 * h * self.num_kv_heads * hd
        o = nq * hd * h
        return q + kv + o

    def linear_attention_params_per_layer(self) -> int:
        """Weights of one gated-DeltaNet block."""
        h = self.hidden_size
        nk, nv = self.linear_num_key_heads, self.linear_num_value_heads
        dk, dv = self.linear_key_head_dim, self.linear_value_head_dim
        in_proj = h * (2 * nk * dk + 2 * nv * dv) + h * 2 * nv
        conv = (2 * nk * dk + nv * dv) * self.linear_conv_kernel_dim
        out = nv * dv * h
        return in_proj + conv + out

    def expert_params(self) -> int:
        """Weights of one routed expert (gated MLP: gate, up, down)."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    def param_count(self) -> ParamCount:
        h, L = self.hidden_size, self.num_layers
        cat: dict[str, int] = {}
        cat["embed"] = self.vocab_size * h
        cat["lm_head"] = 0 if self.tie_embeddings else self.vocab_size * h
        n_soft = self.num_full_layers + self.num_sliding_layers
        cat["attention"] = n_soft * self.attention_params_per_layer()
        cat["linear_attention"] = self.num_linear_layers * self.linear_attention_params_per_layer()
        cat["dense_mlp"] = self.num_dense_layers * 3 * h * self.intermediate_size
        n_moe = self.num_moe_layers
        cat["routed_experts"] = n_moe * self.num_experts * self.expert_params()
        cat["shared_experts"] = n_moe * 3 * h * self.shared_expert_intermediate_size
        cat["router"] = n_moe * h * self.num_experts
        cat["norms"] = (2 * L + 1) * h
        total = sum(cat.values())
        active = total - cat["routed_experts"] + n_moe * self.experts_per_token * self.expert_params()
        return ParamCount(total=total, active=active, by_category=cat)

    # -------------------------------------------------------------- KV cache
    def kv_heads_per_gpu(self, tp: int) -> int:
        """GQA kv heads one GPU of a tp group holds (replicated when kv_heads < tp)."""
        return max(1, math.ceil(self.num_kv_heads / tp))

    def kv_bytes_per_token_layer(self, kv_dtype_bytes: float, tp: int = 1) -> float:
        """KV bytes one softmax-attention layer stores per token on one GPU."""
        if self.is_mla:
            # latent + rope key, not split by attention TP (every rank holds the latent)
            b = (self.kv_lora_rank + self.qk_rope_head_dim) * kv_dtype_bytes
            if self.index_topk:
                b += self.index_head_dim + 4  # fp8 indexer key + fp32 scale
            return b
        return 2 * self.kv_heads_per_gpu(tp) * self.head_dim * kv_dtype_bytes

    def kv_bytes_per_token_full(self, kv_dtype_bytes: float, tp: int = 1) -> float:
        """Per-token KV bytes over the full-attention layers (grows with context)."""
        return self.num_full_layers * self.kv_bytes_per_token_layer(kv_dtype_bytes, tp)

    def kv_bytes_per_token_window(self, kv_dtype_bytes: float, tp: int = 1) -> float:
        """Per-token KV bytes over sliding-window layers (only the last window is kept)."""
        return self.num_sliding_layers * self.kv_bytes_per_token_layer(kv_dtype_bytes, tp)

    def kv_bytes_per_token(self, kv_dtype_bytes: float, tp: int = 1) -> float:
        """Per-token KV bytes over all softmax layers, as if every layer kept every token.

        Equals the exact cost for contexts within the sliding window; engines without a
        hybrid allocator reserve this much per token.
        """
        return self.kv_bytes_per_token_full(kv_dtype_bytes, tp) + self.kv_bytes_per_token_window(
            kv_dtype_bytes, tp
        )

    def kv_bytes_for_context(self, ctx: int, kv_dtype_bytes: float, tp: int = 1) -> float:
        """KV bytes one request of ``ctx`` tokens holds on one GPU (window-capped)."""
        win = min(ctx, self.sliding_window) if self.sliding_window else ctx
        return (self.kv_bytes_per_token_full(kv_dtype_bytes, tp) * ctx
                + self.kv_bytes_per_token_window(kv_dtype_bytes, tp) * win)

    def state_bytes_per_request(self, state_dtype_bytes: float = 2, tp: int = 1) -> float:
        """Recurrent-state bytes one request holds on one GPU over all linear layers.

        Per layer: the DeltaNet state (value heads × key dim × value dim) plus the causal
        conv window ((kernel − 1) × conv channels); heads are split across tp.
        """
        if not self.num_linear_layers:
            return 0.0
        nk = max(1, math.ceil(self.linear_num_key_heads / tp))
        nv = max(1, math.ceil(self.linear_num_value_heads / tp))
        dk, dv = self.linear_key_head_dim, self.linear_value_head_dim
        ssm = nv * dk * dv
        conv = (2 * nk * dk + nv * dv) * max(0, self.linear_conv_kernel_dim - 1)
        return self.num_linear_layers * (ssm + conv) * state_dtype_bytes


# ---------------------------------------------------------------------- parsing
def _get(cfg: dict, *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    return default


def parse_config(cfg: dict[str, Any], name: str = "", source: str = "") -> ModelArch:
    """Build a :class:`ModelArch` from a parsed HF config dict."""
    where = source or name or "config.json"
    if not isinstance(cfg, dict):
        raise ModelError(f"{where}: expected a JSON object, found {type(cfg).__name__}")
    archs = cfg.get("architectures") or []
    arch_name = archs[0] if archs else ""
    mtype = cfg.get("model_type") or SUPPORTED_ARCHITECTURES.get(arch_name, "")
    if mtype not in SUPPORTED_MODEL_TYPES:
        if arch_name in SUPPORTED_ARCHITECTURES:
            mtype = SUPPORTED_ARCHITECTURES[arch_name]
        else:
            raise ModelError(
                f"{where}: unsupported model (model_type={cfg.get('model_type')!r}, "
                f"architectures={archs!r}); supported model_type values: "
                f"{', '.join(sorted(SUPPORTED_MODEL_TYPES))}"
            )
    top = cfg
    if "text_config" in cfg and isinstance(cfg["text_config"], dict):
        # multimodal wrappers (Kimi-K2.5, Qwen3.5): the decoder lives in text_config
        cfg = {**{k: v for k, v in top.items() if k != "text_config"}, **cfg["text_config"]}
    try:
        return _parse(cfg, top, mtype, arch_name, name, where)
    except KeyError as e:
        raise ModelError(f"{where}: missing required key {e.args[0]!r} for model_type {mtype!r}") from None
    except (TypeError, ValueError) as e:
        raise ModelError(f"{where}: bad value in config ({e})") from None


def _parse(cfg: dict, top: dict, mtype: str, arch_name: str, name: str, where: str) -> ModelArch:
    L = int(cfg["num_hidden_layers"])
    h = int(cfg["hidden_size"])
    nq = int(cfg["num_attention_heads"])
    nkv = int(_get(cfg, "num_key_value_heads", default=nq))
    head_dim = int(_get(cfg, "head_dim", default=h // nq))
    inter = int(_get(cfg, "intermediate_size", default=0))
    vocab = int(cfg["vocab_size"])
    tie = bool(_get(top, "tie_word_embeddings", default=_get(cfg, "tie_word_embeddings", default=False)))
    max_pos = int(_get(cfg, "max_position_embeddings", default=0))
    kw: dict[str, Any] = {}

    # ---- MoE
    E = int(_get(cfg, "n_routed_experts", "num_local_experts", "num_experts", default=0))
    if E:
        k = int(_get(cfg, "num_experts_per_tok", "experts_per_token", default=0))
        moe_inter = int(_get(cfg, "moe_intermediate_size", default=0))
        if not moe_inter:  # mixtral, gpt-oss, minimax: intermediate_size is the expert width
            moe_inter = inter
        n_shared = int(_get(cfg, "n_shared_experts", default=0))
        shared_size = n_shared * moe_inter
        if "shared_expert_intermediate_size" in cfg and cfg["shared_expert_intermediate_size"]:
            shared_size = int(cfg["shared_expert_intermediate_size"])
            n_shared = max(n_shared, 1)
        first_k = int(_get(cfg, "first_k_dense_replace", default=0))
        freq = int(_get(cfg, "moe_layer_freq", default=1) or 1)
        sparse_step = int(_get(cfg, "decoder_sparse_step", default=1) or 1)
        mlp_only = set(_get(cfg, "mlp_only_layers", default=[]) or [])
        mask = tuple(
            i >= first_k and i % freq == 0 and (i + 1) % sparse_step == 0 and i not in mlp_only
            for i in range(L)
        )
        kw.update(num_experts=E, experts_per_token=k, moe_intermediate_size=moe_inter,
                  num_shared_experts=n_shared, shared_expert_intermediate_size=shared_size,
                  first_k_dense_replace=first_k, moe_layer_mask=mask)
    else:
        kw["moe_layer_mask"] = tuple(False for _ in range(L))

    # ---- MLA
    if mtype in _MLA_TYPES:
        kw.update(q_lora_rank=int(_get(cfg, "q_lora_rank", default=0)),
                  kv_lora_rank=int(cfg["kv_lora_rank"]),
                  qk_nope_head_dim=int(cfg["qk_nope_head_dim"]),
                  qk_rope_head_dim=int(cfg["qk_rope_head_dim"]),
                  v_head_dim=int(cfg["v_head_dim"]))
        head_dim = kw["qk_nope_head_dim"] + kw["qk_rope_head_dim"]
        nkv = nq  # MLA expands the latent to every head; KV bytes use the latent
        if _get(cfg, "index_topk"):
            kw.update(index_topk=int(cfg["index_topk"]), index_n_heads=int(cfg["index_n_heads"]),
                      index_head_dim=int(cfg["index_head_dim"]))
    kw["num_mtp_layers"] = int(_get(cfg, "num_nextn_predict_layers", "num_mtp_modules", default=0))
    kw["qk_norm_across_heads"] = bool(_get(cfg, "use_qk_norm", default=False)) and \
        _get(cfg, "qk_norm_type", default="per_head") == "per_layer"

    # ---- layer kinds
    kinds: list[str]
    layer_types = _get(cfg, "layer_types")
    window = 0
    if mtype in _HYBRID_LINEAR_TYPES:
        if layer_types:
            kinds = ["linear" if t == "linear_attention" else "full" for t in layer_types[:L]]
        else:
            interval = int(_get(cfg, "full_attention_interval", default=4))
            kinds = ["full" if (i + 1) % interval == 0 else "linear" for i in range(L)]
        kw.update(linear_num_key_heads=int(cfg["linear_num_key_heads"]),
                  linear_num_value_heads=int(cfg["linear_num_value_heads"]),
                  linear_key_head_dim=int(cfg["linear_key_head_dim"]),
                  linear_value_head_dim=int(cfg["linear_value_head_dim"]),
                  linear_conv_kernel_dim=int(_get(cfg, "linear_conv_kernel_dim", default=4)),
                  attn_output_gate=bool(_get(cfg, "attn_output_gate", default=True)))
    elif layer_types:
        kinds = ["sliding" if t == "sliding_attention" else "full" for t in layer_types[:L]]
        window = int(_get(cfg, "sliding_window", default=0))
    elif _get(cfg, "use_sliding_window", default=False) and _get(cfg, "sliding_window"):
        window = int(cfg["sliding_window"])
        mwl = int(_get(cfg, "max_window_layers", default=L))
        kinds = ["sliding" if i >= mwl else "full" for i in range(L)]  # HF Qwen2 convention
    else:
        kinds = ["full"] * L
    if len(kinds) != L:
        raise ModelError(f"{where}: layer_types has {len(kinds)} entries, expected {L}")
    if "sliding" not in kinds:
        window = 0

    return ModelArch(
        name=name or str(top.get("_name_or_path", "")) or arch_name or mtype,
        family=mtype, architecture=arch_name, num_layers=L, hidden_size=h,
        num_attention_heads=nq, num_kv_heads=nkv, head_dim=head_dim, intermediate_size=inter,
        vocab_size=vocab, tie_embeddings=tie, max_position_embeddings=max_pos,
        layer_kinds=tuple(kinds), sliding_window=window, config_source=where,
        quantization=weight_dtype_of(top.get("quantization_config")),
        fp8_block_scales=fp8_block_scaled(top.get("quantization_config")), **kw,
    )


# ------------------------------------------------------------------- bundled
BUNDLED_DIR = Path(__file__).parent / "bundled"

#: Names that resolve to another bundled config with the same shapes (quantized or
#: re-released checkpoints, instruct/base twins, renamed orgs).  Documented in
#: models/bundled/README.md.
ALIASES: dict[str, str] = {
    "Qwen/Qwen3-235B-A22B-FP8": "Qwen/Qwen3-235B-A22B",
    "Qwen/Qwen3-235B-A22B-Instruct-2507": "Qwen/Qwen3-235B-A22B",
    "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": "Qwen/Qwen3-235B-A22B",
    "Qwen/Qwen3-32B-FP8": "Qwen/Qwen3-32B",
    "nvidia/Qwen3-32B-NVFP4": "Qwen/Qwen3-32B",
    "Qwen/Qwen3-8B-FP8": "Qwen/Qwen3-8B",
    "Qwen/Qwen3-30B-A3B-FP8": "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-Next-80B-A3B-Thinking": "Qwen/Qwen3-Next-80B-A3B-Instruct",
    "Qwen/Qwen3-Next-80B-A3B-Instruct-FP8": "Qwen/Qwen3-Next-80B-A3B-Instruct",
    "Qwen/Qwen3.5-397B-A17B-FP8": "Qwen/Qwen3.5-397B-A17B",
    "deepseek-ai/DeepSeek-R1": "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1-0528": "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-V3-0324": "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-V3.1": "deepseek-ai/DeepSeek-V3",
    "nvidia/DeepSeek-R1-NVFP4": "deepseek-ai/DeepSeek-V3",
    "nvidia/DeepSeek-R1-0528-NVFP4": "deepseek-ai/DeepSeek-V3",
    "nvidia/DeepSeek-R1-0528-FP4-v2": "deepseek-ai/DeepSeek-V3",
    "nvidia/DeepSeek-R1-FP4": "deepseek-ai/DeepSeek-V3",
    "nvidia/DeepSeek-V3-0324-FP4": "deepseek-ai/DeepSeek-V3",
    "nvidia/DeepSeek-V3.1-NVFP4": "deepseek-ai/DeepSeek-V3",
    "amd/DeepSeek-R1-0528-MXFP4": "deepseek-ai/DeepSeek-V3",
    "meta-llama/Llama-3.1-8B": "meta-llama/Llama-3.1-8B-Instruct",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Llama-3.1-8B-Instruct",
    "nvidia/Llama-3.1-8B-Instruct-FP4": "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Llama-3.1-70B",
    "meta-llama/Llama-3.3-70B-Instruct": "meta-llama/Llama-3.1-70B",
    "nvidia/Llama-3.1-70B-Instruct-FP8": "meta-llama/Llama-3.1-70B",
    "nvidia/Llama-3.3-70B-Instruct-FP8": "meta-llama/Llama-3.1-70B",
    "nvidia/Llama-3.3-70B-Instruct-FP4": "meta-llama/Llama-3.1-70B",
    "meta-llama/Llama-3.1-405B-Instruct": "meta-llama/Llama-3.1-405B",
    "meta-llama/Llama-3.1-405B-Instruct-FP8": "meta-llama/Llama-3.1-405B",
    "nvidia/Llama-3.1-405B-Instruct-FP8": "meta-llama/Llama-3.1-405B",
    "zhipuai/GLM-5": "zai-org/GLM-5",
    "zai-org/GLM-5-FP8": "zai-org/GLM-5",
    "zai-org/GLM-4.6-FP8": "zai-org/GLM-4.6",
    "moonshotai/Kimi-K2.5-NVFP4": "moonshotai/Kimi-K2.5",
    "nvidia/Kimi-K2.5-NVFP4": "moonshotai/Kimi-K2.5",
    "openai/gpt-oss-120b-FP8": "openai/gpt-oss-120b",
    "mistralai/Mixtral-8x7B-v0.1": "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "mistralai/Mixtral-8x22B-Instruct-v0.1": "mistralai/Mixtral-8x22B-v0.1",
    "Qwen/Qwen3-14B-FP8": "Qwen/Qwen3-14B",
    "Qwen/Qwen3-14B-Base": "Qwen/Qwen3-14B",
    "codellama/CodeLlama-34b-Instruct-hf": "codellama/CodeLlama-34b-hf",
    "codellama/CodeLlama-34b-Python-hf": "codellama/CodeLlama-34b-hf",
    "meta-llama/Llama-2-70b-chat-hf": "meta-llama/Llama-2-70b-hf",
    "nvidia/MiniMax-M2.5-NVFP4": "MiniMaxAI/MiniMax-M2.5",
}

#: Aliases that name a block-scaled fp8 release of the bundled config (Qwen's and Z.ai's FP8
#: checkpoints: ``quant_method: fp8`` with ``weight_block_size: [128, 128]`` in their configs).
BLOCK_FP8_ALIASES = frozenset(name for name in ALIASES if name.endswith("-FP8")
                              and name.split("/")[0] in ("Qwen", "zai-org"))


def _file_for(hf_id: str) -> Path:
    return BUNDLED_DIR / (hf_id.replace("/", "__") + ".json")


def bundled_models() -> list[str]:
    """HF ids of the bundled configs."""
    return sorted(p.stem.replace("__", "/") for p in BUNDLED_DIR.glob("*.json"))


@lru_cache(maxsize=1)
def _name_table() -> dict[str, str]:
    """Lower-cased accepted name → canonical id (bundled id or alias key).

    Built once per process: the bundled folder ships with the package and does not change
    while it runs (every calibration lookup and model load resolves a name through it).
    """
    table: dict[str, str] = {}
    for hf_id in list(bundled_models()) + list(ALIASES):
        table.setdefault(hf_id.lower(), hf_id)
        table.setdefault(hf_id.split("/", 1)[1].lower(), hf_id)  # short alias: repo name
    return table


def resolve_name(name: str) -> tuple[str, str] | None:
    """(canonical id, bundled id) for a known name, or None."""
    canon = _name_table().get(name.strip().lower())
    if canon is None:
        return None
    return canon, ALIASES.get(canon, canon)


def _read_json(path: Path, where: str) -> dict:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ModelError(f"{where}: not valid JSON (line {e.lineno}: {e.msg})") from None
    except OSError as e:
        raise ModelError(f"{where}: cannot read ({e.strerror})") from None


def load_model(name_or_path: str | Path) -> ModelArch:
    """Architecture for a HF id, short alias (e.g. ``qwen3-32b``), or local config path.

    A local path may be a ``config.json`` file or a folder holding one.  Unknown names
    raise :class:`ModelError` listing the bundled models.
    """
    s = str(name_or_path)
    p = Path(s).expanduser()
    looks_like_path = p.suffix == ".json" or s.startswith((".", "/", "~")) or p.is_dir()
    if p.is_dir():
        p = p / "config.json"
        if not p.is_file():
            raise ModelError(f"{s}: folder has no config.json")
    if p.is_file():
        return parse_config(_read_json(p, str(p)), name=str(p), source=str(p))
    hit = resolve_name(s)
    if hit is not None:
        canon, bundled = hit
        path = _file_for(bundled)
        arch = parse_config(_read_json(path, path.name), name=canon, source=bundled)
        return replace(arch, name=canon, config_source=bundled,
                       fp8_block_scales=arch.fp8_block_scales or canon in BLOCK_FP8_ALIASES)
    if looks_like_path:
        raise ModelError(f"model config {s!r}: no such file")
    raise ModelError(
        f"unknown model {s!r}{did_you_mean(s, [*bundled_models(), *ALIASES])}: not a local config.json and not "
        "bundled. Bundled models: "
        f"{', '.join(bundled_models())}; aliases: {', '.join(sorted(ALIASES))}. "
        "Pass the path of the model's config.json to use another model."
    )
