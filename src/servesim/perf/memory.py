"""GPU memory: weights per GPU for a parallel layout and the KV-cache capacity engines compute.

Sharding rules (per GPU of a worker with ``gpus = tp × attention_dp = moe_tp × ep``):

- attention projections split by ``tp`` (GQA k/v heads replicated when kv_heads < tp; MLA
  down-projections ``q_a``/``kv_a`` and the sparse-attention indexer key projection are
  replicated, the up-projections and ``o`` split);
- linear-attention blocks split by ``tp``;
- routed experts split over all GPUs (``ep`` experts groups × ``moe_tp`` within an expert);
- dense MLP: split by ``tp`` for dense models, over all GPUs for the dense layers of MoE
  models; shared experts over all GPUs; router and norms replicated;
- embeddings and LM head vocab-parallel over ``tp``.

KV capacity per worker rank (every rank of a TP group holds the same tokens, its own heads;
each attention-DP rank has its own pool for its own requests):

- SGLang: ``mem_fraction_static × total − weights − non-torch overhead``;
- vLLM: ``gpu_memory_utilization × total − weights − activation peak − non-torch − CUDA graphs``;
- TRT-LLM: ``free_gpu_memory_fraction × (total − weights − activations − non-torch)``.

The budget is divided by the per-token KV bytes of the full-attention layers.  Sliding-window
layers and linear-attention layers do not grow with context: the approximation reserves,
per running request (``max_running_requests``), one window of sliding-layer KV and one
recurrent state, up front, and gives the rest to full-attention tokens (what hybrid
allocators converge to when every running request has at least a window of context).
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.errors import ModelError
from servesim.hardware.gpu import GPUSpec
from servesim.models.arch import ModelArch
from servesim.perf.precision import fp4_output_projection, kv_bytes, layer_dtypes, weight_bytes

GB = 1e9
ENGINES = ("sglang", "vllm", "trtllm")


@dataclass(frozen=True, slots=True)
class Layout:
    """One worker's parallel layout: ``gpus = tp × attention_dp = moe_tp × ep``."""

    tp: int = 1
    ep: int = 1
    attention_dp: int = 1

    def __post_init__(self) -> None:
        for k in ("tp", "ep", "attention_dp"):
            if getattr(self, k) < 1:
                raise ModelError(f"layout.{k} must be >= 1, found {getattr(self, k)}")
        if self.gpus % self.ep:
            raise ModelError(
                f"layout: ep={self.ep} must divide the worker's gpus = tp × attention_dp = {self.gpus}"
            )

    @property
    def gpus(self) -> int:
        return self.tp * self.attention_dp

    @property
    def moe_tp(self) -> int:
        return self.gpus // self.ep


def weight_bytes_by_category(model: ModelArch, weight_dtype: str, layout: Layout,
                             vendor: str = "nvidia") -> dict[str, float]:
    """Weight bytes one GPU holds, by category (see module docstring for sharding); ``vendor``:
    the GPU's (which checkpoint an upstream name loads, perf/precision.py ``fp4_output_projection``)."""
    dt = layer_dtypes(weight_dtype, model.family, model.is_moe,
                      fp4_o_proj=model.is_mla and fp4_output_projection(model.name, weight_dtype, vendor))
    b = {k: weight_bytes(v) for k, v in dt.items()}
    tp, gpus = layout.tp, layout.gpus
    h = model.hidden_size
    out: dict[str, float] = {}
    out["embed"] = model.vocab_size * h / tp * b["embed"]
    out["lm_head"] = 0.0 if model.tie_embeddings else model.vocab_size * h / tp * b["lm_head"]
    n_soft = model.num_full_layers + model.num_sliding_layers
    out["attention"] = n_soft * attention_params_per_gpu(model, tp) * b["attention"]
    if b["attention_out"] != b["attention"]:  # the output projection (tp-split) at its own precision
        o_proj = model.num_attention_heads * (model.v_head_dim if model.is_mla else model.head_dim) * h / tp
        out["attention"] += n_soft * o_proj * (b["attention_out"] - b["attention"])
    out["linear_attention"] = (model.num_linear_layers * model.linear_attention_params_per_layer() / tp
                               * b["linear_attention"])
    mlp_split = gpus if model.is_moe else tp
    out["dense_mlp"] = model.num_dense_layers * 3 * h * model.intermediate_size / mlp_split * b["dense_mlp"]
    n_moe = model.num_moe_layers
    out["routed_experts"] = n_moe * model.num_experts * model.expert_params() / gpus * b["routed_experts"]
    out["shared_experts"] = n_moe * 3 * h * model.shared_expert_intermediate_size / gpus * b["shared_experts"]
    out["router"] = n_moe * h * model.num_experts * b["router"]
    out["norms"] = (2 * model.num_layers + 1) * h * b["norms"]
    return out


def attention_params_per_gpu(model: ModelArch, tp: int) -> float:
    """Weights of one softmax-attention layer on one GPU of a tp group."""
    h, nq = model.hidden_size, model.num_attention_heads
    if model.is_mla:
        qk = model.qk_nope_head_dim + model.qk_rope_head_dim
        rep = h * (model.kv_lora_rank + model.qk_rope_head_dim)
        split = model.kv_lora_rank * nq * (model.qk_nope_head_dim + model.v_head_dim) + nq * model.v_head_dim * h
        if model.q_lora_rank:
            rep += h * model.q_lora_rank
            split += model.q_lora_rank * nq * qk
        else:
            split += h * nq * qk
        if model.index_topk:
            qr = model.q_lora_rank or h
            rep += h * model.index_head_dim + h * model.index_n_heads
            split += qr * model.index_n_heads * model.index_head_dim
        return rep + split / tp
    hd = model.head_dim
    q = h * nq * hd * (2 if model.attn_output_gate else 1)
    o = nq * hd * h
    kv = 2 * h * model.kv_heads_per_gpu(tp) * hd
    return (q + o) / tp + kv


def weights_bytes_per_gpu(model: ModelArch, weight_dtype: str, layout: Layout, vendor: str = "nvidia") -> float:
    """Total weight bytes one GPU of the worker holds."""
    return sum(weight_bytes_by_category(model, weight_dtype, layout, vendor).values())


def activation_bytes(model: ModelArch, layout: Layout, max_num_batched_tokens: int, max_running_requests: int) -> float:
    """Peak activation estimate of a profiling forward pass (vLLM / TRT-LLM reserve this).

    ``tokens × 2 B × (4·hidden + 3·MLP width per GPU)`` for the hidden states and the widest
    MLP intermediates, plus fp32 logits and probabilities for ``max_running_requests`` rows.
    """
    tp = layout.tp
    mlp = model.intermediate_size / tp
    if model.is_moe:
        mlp = max(mlp, model.experts_per_token * model.moe_intermediate_size / max(1, layout.moe_tp))
    hidden = max_num_batched_tokens * 2.0 * (4 * model.hidden_size + 3 * mlp)
    logits = max_running_requests * model.vocab_size * 4.0 * 2
    return hidden + logits


@dataclass(frozen=True, slots=True)
class MemoryBudget:
    """How one GPU's memory is spent; all in bytes except ``kv_tokens``."""

    engine: str
    total_bytes: float
    weights_bytes: float
    reserve_bytes: float  # activations, CUDA graphs, non-torch (context, NCCL)
    state_bytes: float  # per-request recurrent state + sliding windows, reserved up front
    kv_bytes: float  # left for full-attention KV
    kv_bytes_per_token: float
    kv_tokens: int


#: The engine option that sets the share of GPU memory the engine may use, as the config names it.
MEM_FRACTION_KEY = {"sglang": "mem_fraction_static", "vllm": "gpu_memory_utilization",
                    "trtllm": "free_gpu_memory_fraction"}


def memory_budget(
    model: ModelArch,
    gpu: GPUSpec,
    layout: Layout,
    kv_dtype: str = "bf16",
    mem_fraction: float = 0.9,
    *,
    engine: str = "sglang",
    weight_dtype: str = "bf16",
    max_running_requests: int = 256,
    max_num_batched_tokens: int = 8192,
    non_torch_gb: float = 1.0,
    cuda_graph_gb: float = 0.5,
    activation_gb: float | None = None,
    state_dtype_bytes: float = 2.0,
) -> MemoryBudget:
    """Memory split of one worker rank as ``engine`` computes it (see module docstring).

    ``mem_fraction`` is SGLang's ``mem_fraction_static``, vLLM's ``gpu_memory_utilization``
    or TRT-LLM's ``free_gpu_memory_fraction``.  Raises :class:`ModelError` when the weights
    and reserves do not fit, naming the shortfall in GB.
    """
    if engine not in ENGINES:
        raise ModelError(f"unknown engine {engine!r} for the memory model; expected one of {list(ENGINES)}")
    if not 0 < mem_fraction <= 1:
        raise ModelError(f"memory fraction must be in (0, 1], found {mem_fraction}")
    total = gpu.memory_bytes
    weights = weights_bytes_per_gpu(model, weight_dtype, layout, gpu.vendor)
    act = (activation_gb * GB if activation_gb is not None
           else activation_bytes(model, layout, max_num_batched_tokens, max_running_requests))
    non_torch = non_torch_gb * GB
    if engine == "sglang":
        reserve = non_torch
        budget = mem_fraction * total - weights - reserve
        usable_desc = f"mem_fraction_static {mem_fraction} × {total / GB:.1f} GB"
    elif engine == "vllm":
        reserve = act + non_torch + cuda_graph_gb * GB
        budget = mem_fraction * total - weights - reserve
        usable_desc = f"gpu_memory_utilization {mem_fraction} × {total / GB:.1f} GB"
    else:
        reserve = act + non_torch
        budget = mem_fraction * (total - weights - reserve)
        usable_desc = f"{total / GB:.1f} GB total"
    kvb = kv_bytes(kv_dtype)
    per_tok = model.kv_bytes_per_token_full(kvb, layout.tp)
    win = model.sliding_window * model.kv_bytes_per_token_window(kvb, layout.tp)
    state = max_running_requests * (model.state_bytes_per_request(state_dtype_bytes, layout.tp) + win)
    kv = budget - state
    if budget <= 0 or kv <= 0 or per_tok <= 0:
        short = -min(budget, kv) if min(budget, kv) < 0 else 0.0
        raise ModelError(
            f"{model.name} does not fit on {gpu.name} with {layout.gpus} GPU(s) "
            f"(tp={layout.tp}, ep={layout.ep}, attention_dp={layout.attention_dp}, weights {weight_dtype}, "
            f"{engine}): weights {weights / GB:.1f} GB per GPU + reserve {reserve / GB:.1f} GB"
            + (f" + per-request state {state / GB:.1f} GB" if state else "")
            + f" exceed what {usable_desc} allows by {short / GB:.1f} GB; "
            f"use more GPUs (deployment.tp), a smaller weight precision (deployment.weight_dtype, now "
            f"{weight_dtype}) or a larger memory fraction (deployment.engine.{MEM_FRACTION_KEY[engine]})"
        )
    tokens = int(kv // per_tok)
    if tokens < 1:
        raise ModelError(f"{model.name} on {gpu.name}: no room for a single KV token; use more GPUs (deployment.tp), "
                         f"a smaller weight precision (deployment.weight_dtype, now {weight_dtype}) or a larger memory "
                         f"fraction (deployment.engine.{MEM_FRACTION_KEY[engine]})")
    return MemoryBudget(engine=engine, total_bytes=total, weights_bytes=weights, reserve_bytes=reserve,
                        state_bytes=state, kv_bytes=kv, kv_bytes_per_token=per_tok, kv_tokens=tokens)


def kv_capacity_tokens(
    model: ModelArch,
    gpu: GPUSpec,
    layout: Layout,
    kv_dtype: str = "bf16",
    mem_fraction: float = 0.9,
    **kwargs,
) -> int:
    """KV-cache capacity in tokens of one worker rank; see :func:`memory_budget`."""
    return memory_budget(model, gpu, layout, kv_dtype, mem_fraction, **kwargs).kv_tokens
