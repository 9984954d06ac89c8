"""How many operations a forward pass launches from the host when it runs outside a CUDA graph.

A CUDA graph replays a whole decode pass with one launch.  A pass that runs *eagerly* in PyTorch
(SGLang's prefill passes unless piecewise CUDA graphs are on, any batch larger than the
captured graphs) dispatches every operation of every layer from Python:
module call, argument checks, the framework's dispatcher, the kernel launch.  That host time per
operation is tens of microseconds, so a model with many small operations per layer pays a fixed
cost per pass that does not shrink with the prompt: SGLang's piecewise-CUDA-graph work measured a
DeepSeek-V3 forward of one new token at 82.6 ms eager against 23.1 ms from a graph (sglang PR
#12160), ~60 ms of host time for 61 layers.  vLLM compiles its model with torch.compile (fused
Triton kernels, piecewise graphs) and TensorRT-LLM runs fused custom ops, so their eager passes
launch far fewer operations; their per-layer cost stays ``AnalyticParams.layer_overhead_s``.

:func:`eager_ops_per_layer` counts the operations of one layer by its parts, as the engines'
model code (SGLang's ``llama.py``, ``deepseek_v2.py``, ``qwen3_moe.py``) runs them; the counts
are approximate (small tensor reshapes, copies and quantization kernels are folded into the
operation they serve), and ``AnalyticParams.eager_op_s`` is set so that the DeepSeek-V3 count
reproduces the measurement above (docs/physics.md).
"""

from __future__ import annotations

from servesim.models.arch import ModelArch

#: Input norm (with the residual add), QKV projection, rotary embedding, attention, output projection.
ATTENTION_OPS = 5
#: MLA's low-rank path: the q and kv down-projections' norms, the q and kv up-projections, the
#: rotary part's split and re-join (the down-projection itself is the QKV projection above).
MLA_EXTRA_OPS = 6
#: The DeepSeek sparse-attention indexer: its projections, norm, rotary, scores and top-k.
INDEXER_OPS = 6
#: Post-attention norm, gate-up projection, activation, down projection.
DENSE_MLP_OPS = 4
#: Post-attention norm, router GEMM, top-k selection, token permutation (sort and align),
#: activation quantization, the two grouped GEMMs with the activation between, un-permute and sum.
MOE_OPS = 9
#: Shared experts: their gate-up projection, activation, down projection.
SHARED_EXPERT_OPS = 3
#: Gated DeltaNet in place of attention: in-projection, short convolution, gates, the chunked
#: recurrence, norm, output projection.
LINEAR_ATTENTION_OPS = 6
#: Tensor-parallel all-reduces of a layer (after attention, after the MLP).
ALLREDUCE_OPS = 2


def _attention_ops(arch: ModelArch, kind: str) -> int:
    if kind == "linear":
        return LINEAR_ATTENTION_OPS
    ops = ATTENTION_OPS + (MLA_EXTRA_OPS if arch.is_mla else 0)
    return ops + (INDEXER_OPS if arch.index_topk else 0)


def _mlp_ops(arch: ModelArch, moe: bool) -> int:
    if not moe:
        return DENSE_MLP_OPS
    return MOE_OPS + (SHARED_EXPERT_OPS if arch.num_shared_experts or arch.shared_expert_intermediate_size else 0)


def eager_ops_per_layer(arch: ModelArch, tp: int) -> float:
    """Mean operations one layer of ``arch`` launches in an eager forward with ``tp`` GPUs."""
    n = arch.num_layers
    kinds = arch.layer_kinds or ("full",) * n
    moe_mask = arch.moe_layer_mask or (arch.is_moe,) * n
    comm = ALLREDUCE_OPS if tp > 1 else 0
    total = sum(_attention_ops(arch, kinds[i]) + _mlp_ops(arch, moe_mask[i]) + comm for i in range(n))
    return total / n
