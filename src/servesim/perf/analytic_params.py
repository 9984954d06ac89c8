"""The analytic model's calibratable constants (:class:`AnalyticParams`).

A parameter schema, apart from the model that reads it (``perf/analytic.py``): calibration files
(``perf/calibration.py``), the sensitivity and group fits (``validate/``) and the op model
(``perf/kernels.py``) use the fields and their defaults without the step-time model itself.
The defaults are physical values: docs/physics.md checks them against measured kernel tables.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class AnalyticParams(BaseModel):
    """Named, calibratable constants of the analytic model (defaults: typical H100/B200 serving)."""

    model_config = ConfigDict(extra="forbid")

    # GEMMs
    gemm_eff_max: float = Field(0.80, gt=0, le=1, description="peak fraction large GEMMs reach")
    gemm_half_tokens: float = Field(
        0.0, ge=0, description="rows at which an extra GEMM efficiency ramp m/(m + half) is half; 0: none (the "
        "tile and wave model prices small-M GEMMs; kept so older calibration files load)")
    moe_eff_scale: float = Field(
        0.261, gt=0, le=1, description="grouped-GEMM efficiency relative to dense GEMMs (fitted on the measured MoE "
        "kernel tables of every NVIDIA GPU, bf16 / fp8 / nvfp4, all frameworks, with moe_expert_s: "
        "benchmarks/fit_kernel_ceilings.py --moe)")
    moe_expert_s: float = Field(
        1.55e-7, ge=0, description="seconds each touched expert adds to a fused-MoE kernel's weight streaming: the "
        "grouped GEMM drains one expert's weight pipeline and fills the next one's (fitted with moe_eff_scale on the "
        "same tables: 0.155 us; without it the weight streaming rate that fits small experts is too slow for large "
        "ones)")
    moe_half_tokens: float = Field(
        0.0, ge=0, description="rows per expert at which an extra grouped-GEMM ramp is half; 0: none (rows are "
        "padded to the grouped GEMM's row tile instead)")
    mem_eff: float = Field(0.85, gt=0, le=1, description="HBM bandwidth fraction reached streaming weights/activations")
    # attention
    attn_prefill_eff_max: float = Field(0.65, gt=0, le=1, description="peak fraction of prefill (flash) attention")
    attn_prefill_half_tokens: float = Field(
        0.0, ge=0, description="chunk tokens at which an extra prefill-attention ramp is half; 0: none (query "
        "blocks padded and run in waves over the SMs instead)")
    attn_decode_mem_eff: float = Field(0.90, gt=0, le=1, description="HBM fraction decode attention reaches reading KV")
    attn_decode_compute_eff: float = Field(0.40, gt=0, le=1, description="peak fraction of decode attention math")
    attn_decode_ctx_overhead_tokens: float = Field(
        64.0, ge=0, description="per-request decode-attention fixed cost, as extra context tokens read (half a "
        "128-token KV tile: a request's last tile is read whole)")
    attn_decode_unit_s: float = Field(
        0.8e-6, ge=0, description="seconds one decode-attention work unit (one request's KV head with its query-head "
        "group: a thread block of the split-KV kernel) holds an SM beyond streaming its KV: its page-table "
        "lookups, the first KV tile's DRAM round trip the pipeline cannot hide, the query load, the partial "
        "output and log-sum-exp write; units run sm_count at a time. Measured on the generation-attention "
        "tables: 7-9 ns per (request, KV head) on B200 / B300 (148 SMs: 1.0-1.3 us per unit), 9 ns for "
        "TensorRT-LLM on H100 / H200 (132 SMs: 1.2 us), 18-20 ns for FlashAttention-3 there (2.5 us with no "
        "overhead tokens); 0.8 us with attn_decode_ctx_overhead_tokens = 64 fits the tables best")
    elementwise_bytes_per_token: float = Field(
        12.0, ge=0, description="hidden-size multiples of bf16 traffic per token per layer (norms, residual, rope)")
    linear_attn_flops_factor: float = Field(
        12.0, ge=0, description="FLOPs per state element per token of the chunked gated-delta kernel (64-token "
        "chunks: intra-chunk products plus the state update)")
    linear_attn_eff: float = Field(
        0.07, gt=0, le=1, description="bf16 peak fraction the chunked / recurrent gated-delta kernels reach "
        "(measured 0.06-0.08 on H100 and B200: they run near the GPU's FP32 non-tensor rate)")
    linear_attn_chain_s: float = Field(
        45e-9, ge=0, description="seconds per token of one (sequence, value head) chain of the chunked gated-delta "
        "kernel: the state is passed from chunk to chunk in order, so a sequence's chunks run one after another "
        "(measured 35-53 ns per token, 2-3.4 us per 64-token chunk, on H100 to B300: "
        "benchmarks/fit_kernel_ceilings.py --gdn)")
    state_dtype_bytes: float = Field(4.0, gt=0, description="bytes per recurrent-state element (fp32 state)")
    # communication
    comm_eff: float = Field(0.70, gt=0, le=1, description="link bandwidth fraction collectives reach")
    allreduce_fixed_s: float = Field(4e-6, ge=0, description="fixed cost of one all-reduce")
    alltoall_fixed_s: float = Field(12e-6, ge=0, description="fixed cost of one all-to-all (dispatch or combine)")
    link_latency_factor: float = Field(0.5, ge=0, description="multiplies the GPU spec's link latency per log2(ranks)")
    comm_time_scale: float = Field(
        1.0, gt=0, description="multiplies every collective's time, fixed and per-token parts (calibrated: "
        "NCCL and custom all-reduce kernels reach a share of the link that varies with message size and engine)")
    # overheads
    pass_overhead_s: float = Field(1.5e-3, ge=0, description="per-pass scheduling + launch (eager/piecewise passes)")
    layer_overhead_s: float = Field(15e-6, ge=0, description="per-layer launch overhead of eager passes")
    eager_op_s: float = Field(
        40e-6, ge=0, description="host time per operation of a PyTorch-eager pass (engines whose plan says "
        "eager_launch: SGLang's prefill passes); perf/launches.py counts the operations. "
        "From sglang PR #12160: DeepSeek-V3, one new token, 82.6 ms eager vs 23.1 ms from a piecewise CUDA graph, "
        "over 61 layers x 24.6 operations")
    graph_pass_overhead_s: float = Field(
        0.5e-3, ge=0, description="what a CUDA-graph decode pass costs beyond its layers (graph launch, input copies, "
        "sampling, the ids' copy back): vLLM's and SGLang's Python model runners; an engine's plan may set its own "
        "(TensorRT-LLM 50 us: engines/trtllm/planner.py), a value here wins over it")
    graph_layer_overhead_s: float = Field(
        0.0, ge=0, description="per-layer CPU overhead inside a CUDA graph (none: a graph replays without launches; "
        "the GPU-side kernel latencies are in the ops)")
    cuda_graph_max_batch: int = Field(512, ge=0, description="largest decode batch replayed from a CUDA graph")
    overhead_per_request_s: float = Field(0.0, ge=0, description="per-request CPU cost per pass (batch bookkeeping)")
