"""SGLang server options that the engine model honours, with SGLang's defaults.

Defaults follow SGLang 0.5.6 (``python/sglang/srt/server_args.py``); where SGLang derives a
value from the GPU or the KV pool (``None`` here), the engine derives it the same way.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SGLangOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Literal["sglang"] = "sglang"
    page_size: int = Field(1, ge=1, description="tokens per KV page; matches are page aligned")
    schedule_policy: Literal["fcfs", "lpm"] = "fcfs"
    chunked_prefill_size: int | None = Field(
        None, description="max new tokens of one prefill pass; None: from GPU memory as SGLang does; <= 0 disables chunking")
    max_prefill_tokens: int = Field(16384, gt=0, description="prefill token budget of one pass")
    max_running_requests: int | None = Field(None, gt=0, description="None: derived from the KV pool as SGLang does")
    mem_fraction_static: float | None = Field(
        None, gt=0, le=1, description="share of GPU memory for weights + KV pool; None: SGLang's formula")
    schedule_conservativeness: float = Field(1.0, gt=0)
    disable_radix_cache: bool = False
    context_length: int | None = Field(None, gt=0, description="None: the model's max_position_embeddings")
    eviction_policy: Literal["lru", "lfu", "fifo", "belady"] = "lru"
    scheduler_recv_interval: int = Field(
        1, ge=1, description="decode passes between the scheduler's pulls of new requests (engines/recv_interval.py)")
    disable_overlap_schedule: bool = Field(
        False, description="run SGLang's normal event loop instead of the overlap one (which decides a pass while "
                           "the previous one runs; engines/sglang/overlap.py); speculative decoding turns it off")
    enable_piecewise_cuda_graph: bool = Field(
        False, description="prefill and mixed passes replay piecewise CUDA graphs (SGLang's "
        "--enable-piecewise-cuda-graph) instead of running eagerly; off: every operation of such a pass is "
        "dispatched from Python (perf/launches.py)")
    load_balance_method: Literal["round_robin", "shortest_queue"] = Field(
        "round_robin", description="attention DP (deployment.attention_dp > 1): how arrivals are placed on ranks")
    moe_a2a_backend: Literal["none", "deepep", "mooncake", "mori", "nixl", "flashinfer"] = Field(
        "none", description="expert parallelism (deployment.ep > 1): SGLang's --moe-a2a-backend; none: every rank's "
        "fused MoE runs over the whole (with DP attention, all-gathered) batch, remote experts masked; another: "
        "an all-to-all dispatcher sends each rank only its routed tokens")
    # host-memory KV tier (docs/engines.md, "Host KV tier"); off by default
    host_kv_gb: float = Field(0.0, ge=0, description="host memory for KV per worker, GB; 0: no host tier")
    host_link_gbs: float | None = Field(
        None, gt=0, description="host-to-GPU bandwidth per GPU, GB/s; None: the GPU's host link (PCIe5 50, C2C 450)")
    host_load_overlap: bool = Field(
        True, description="SGLang HiCache loads layer by layer during the forward (max(compute, load))")
