"""vLLM server options that the engine model honours, with vLLM's defaults.

Defaults follow vLLM 0.11.0 (``vllm/config/scheduler.py``, ``vllm/config/cache.py``,
``vllm/engine/arg_utils.py``, ``vllm/platforms/cuda.py``) as used by the OpenAI server
(``vllm serve``), with async scheduling on, as vLLM runs it from 0.14.0.  Where vLLM derives a
value from the GPU (``None`` here), :func:`resolve_vllm_options` derives it the same way.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: SchedulerConfig's fallbacks when no usage context picks a default (vLLM 0.11).
FALLBACK_MAX_NUM_BATCHED_TOKENS = 2048
FALLBACK_MAX_NUM_SEQS = 128


class VLLMOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Literal["vllm"] = "vllm"
    max_num_batched_tokens: int | None = Field(
        None, gt=0, description="token budget of one pass; None: vLLM's serve default from the GPU")
    max_num_seqs: int | None = Field(None, gt=0, description="max running requests; None: from the GPU")
    max_model_len: int | None = Field(None, gt=1, description="None: the model's context length")
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = Field(0, ge=0, description="max tokens of one prefill chunk; 0: off")
    enable_prefix_caching: bool = True
    block_size: int = Field(16, ge=1, description="tokens per KV block")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    eviction_policy: Literal["lru", "lfu", "fifo", "belady"] = "lru"
    async_scheduling: bool = Field(
        True, description="the engine core schedules a pass while the previous one runs (vLLM's default from 0.14; "
                          "false: --no-async-scheduling, or vLLM before 0.14): its CPU time hides behind the GPU's "
                          "and an arrival joins one pass later")
    all2all_backend: Literal["allgather_reducescatter", "naive", "pplx", "deepep_high_throughput",
                             "deepep_low_latency", "mori", "nixl_ep", "flashinfer_all2allv",
                             "flashinfer_nvlink_one_sided", "flashinfer_nvlink_two_sided"] = Field(
        "allgather_reducescatter", description="expert parallelism with data parallelism (deployment.ep > 1, "
        "attention_dp > 1): vLLM's --all2all-backend; allgather_reducescatter (the default) and naive hand every rank "
        "the whole gathered batch, remote experts masked; the others dispatch each rank only its routed tokens")
    mxfp4_use_marlin: bool = Field(
        False, description="MXFP4 experts (gpt-oss) through vLLM's Marlin MoE instead of its default kernel "
        "(VLLM_MXFP4_USE_MARLIN=1; on Hopper the default is OpenAI's triton_kernels grouped matmul)")
    # host-memory KV tier (docs/engines.md, "Host KV tier"); off by default
    host_kv_gb: float = Field(0.0, ge=0, description="host memory for KV per worker, GB; 0: no host tier")
    host_link_gbs: float | None = Field(
        None, gt=0, description="host-to-GPU bandwidth per GPU, GB/s; None: the GPU's host link (PCIe5 50, C2C 450)")
    host_load_overlap: bool = Field(
        False, description="vLLM's CPU-offload connector loads before the pass runs (compute + load)")


def _big_gpu(gpu_memory_gib: float, gpu_name: str) -> bool:
    return gpu_memory_gib >= 70 and "a100" not in gpu_name.lower()


def default_max_num_batched_tokens(gpu_memory_gib: float, gpu_name: str) -> int:
    """``vllm serve``'s default token budget: 8192 on >= 70 GiB GPUs other than A100, else 2048."""
    return 8192 if _big_gpu(gpu_memory_gib, gpu_name) else 2048


def default_max_num_seqs(gpu_memory_gib: float, gpu_name: str) -> int:
    """``vllm serve``'s default seat count: 1024 on >= 70 GiB GPUs other than A100, else 256."""
    return 1024 if _big_gpu(gpu_memory_gib, gpu_name) else 256


def resolve_vllm_options(options: VLLMOptions, gpu_memory_gib: float | None, gpu_name: str | None,
                         model_context: int) -> VLLMOptions:
    """A copy of ``options`` with every ``None`` filled in as vLLM 0.11's serve entrypoint does.

    ``gpu_memory_gib`` is the GPU's total memory as the driver reports it; ``None`` uses
    SchedulerConfig's fallbacks (2048 tokens, 128 sequences).  When the token budget was not
    given: with chunked prefill off it is raised to ``max_model_len``; it is capped at
    ``max_num_seqs x max_model_len``.
    """
    max_len = options.max_model_len or model_context
    if gpu_memory_gib is None:
        d_tokens, d_seqs = FALLBACK_MAX_NUM_BATCHED_TOKENS, FALLBACK_MAX_NUM_SEQS
    else:
        d_tokens = default_max_num_batched_tokens(gpu_memory_gib, gpu_name or "")
        d_seqs = default_max_num_seqs(gpu_memory_gib, gpu_name or "")
    seqs = options.max_num_seqs or d_seqs
    tokens = options.max_num_batched_tokens
    if tokens is None:
        tokens = d_tokens
        if not options.enable_chunked_prefill:
            tokens = max(max_len, tokens)
        tokens = min(tokens, seqs * max_len)
    return options.model_copy(update={"max_num_batched_tokens": tokens, "max_num_seqs": seqs,
                                      "max_model_len": max_len})
