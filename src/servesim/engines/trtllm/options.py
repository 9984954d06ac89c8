"""TensorRT-LLM options that the engine model honours, with TensorRT-LLM's defaults.

Defaults follow TensorRT-LLM's LLM API (``tensorrt_llm/llmapi/llm_args.py``: BaseLlmArgs,
SchedulerConfig, KvCacheConfig) as read in its main branch in 2025 (see
notes/vllm_trtllm.md): ``max_batch_size`` 2048, ``max_num_tokens`` 8192, capacity policy
GUARANTEED_NO_EVICT, ``enable_chunked_prefill`` False (named ``enable_chunked_context``
here, as in the C++ executor), ``tokens_per_block`` 32, ``enable_block_reuse`` True,
``free_gpu_memory_fraction`` 0.9.

The ``attention_dp_*`` options are TensorRT-LLM's ``attention_dp_config`` (``enable_balance``,
``timeout_iters``, ``batching_wait_iters``; defaults False, 50, 10 in ``AttentionDpConfig``);
they matter only with ``deployment.attention_dp > 1`` (engines/attention_dp.py, ``ADPBalance``).

The ``batch_wait_*`` options are the PyTorch executor's batch waiting (LLM API
``batch_wait_timeout_iters``, ``batch_wait_max_tokens_ratio``; both 0, i.e. off, by default):
context requests the schedulers chose are held back while generation runs, until the
iteration's tokens reach ``ratio × max_num_tokens`` or ``timeout_iters`` iterations were
held (PyExecutor ``_waiting_requests``, 1.1-1.2; see engines/trtllm.py and docs/engines.md).
The executor skips it with attention DP.

``stream_interval`` and ``num_postprocess_workers`` are the LLM API's streaming options (defaults
1 and 0): the executor hands a streaming request's new tokens to the server only every
``stream_interval`` iterations.  Without postprocess workers the client's first chunk comes with
the request's ``stream_interval``-th decoding iteration, not its first; with them, at its first
(what InferenceX's measured rows show: its DeepSeek scripts, ``stream_interval`` 10 and no
postprocess workers, measure TTFT about nine decode iterations after the first token at every
GPU, prompt length and concurrency; its gpt-oss scripts, 20 with 4 postprocess workers, measure
none).  :func:`servesim.engines.streaming.delay_first_chunk` applies it to the recorded times.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TRTLLMOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Literal["trtllm"] = "trtllm"
    max_batch_size: int = Field(2048, gt=0, description="max requests in one iteration")
    max_num_tokens: int = Field(8192, gt=0, description="token budget of one iteration")
    capacity_scheduler_policy: Literal["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"] = "GUARANTEED_NO_EVICT"
    enable_chunked_context: bool = Field(False, description="split long prompts into chunks (LLM API: enable_chunked_prefill)")
    tokens_per_block: int = Field(32, ge=1, description="tokens per KV block")
    enable_block_reuse: bool = True
    free_gpu_memory_fraction: float = Field(0.9, gt=0, le=1, description="share of the memory free after loading")
    max_seq_len: int | None = Field(None, gt=1, description="None: the model's context length")
    eviction_policy: Literal["lru", "lfu", "fifo", "belady"] = "lru"
    # host-memory KV tier (docs/engines.md, "Host KV tier"); off by default
    host_kv_gb: float = Field(0.0, ge=0, description="host memory for KV per worker, GB; 0: no host tier")
    host_link_gbs: float | None = Field(
        None, gt=0, description="host-to-GPU bandwidth per GPU, GB/s; None: the GPU's host link (PCIe5 50, C2C 450)")
    host_load_overlap: bool = Field(
        False, description="TensorRT-LLM onboards offloaded blocks before the iteration (compute + load)")
    # attention DP (deployment.attention_dp > 1): attention_dp_config of the PyTorch executor
    attention_dp_enable_balance: bool = Field(
        False, description="attention DP: hold context requests until every rank has one (or a timeout)")
    attention_dp_timeout_iters: int = Field(
        50, ge=0, description="attention DP balance: iterations a context waits for the other ranks")
    attention_dp_batching_wait_iters: int = Field(
        10, ge=0, description="attention DP balance: further iterations to gather contexts once every rank has one")
    moe_alltoall: bool | None = Field(
        None, description="attention DP with expert parallelism: whether the fused MoE's tokens go by all-to-all "
        "(each rank gets its routed tokens) rather than all-gather / reduce-scatter (each rank the whole batch); "
        "None: TensorRT-LLM's own choice, all-to-all when attention DP > 1, expert parallelism without MoE tensor "
        "parallelism and NVLink between the ranks (TRTLLMGenFusedMoE.select_alltoall_method_type)")
    moe_backend: Literal["CUTLASS", "TRTLLM", "DEEPGEMM", "TRITON", "CUTEDSL", "WIDEEP"] = Field(
        "CUTLASS", description="the fused MoE's kernels (LLM API moe_config.backend; TensorRT-LLM's default "
        "CUTLASS): priced with the engine's measured rates for that kernel where its tables measure it "
        "(on Blackwell: TRTLLM's generated and CUTLASS's NVFP4 kernels, DEEPGEMM's block-fp8 ones; perf/engine_kernels.py)")
    # batch waiting (PyExecutor _waiting_requests; not applied with attention DP)
    batch_wait_timeout_iters: int = Field(
        0, ge=0, description="batch waiting (on only when this and batch_wait_max_tokens_ratio are both > 0): "
        "most iterations in a row that contexts are held while generation runs")
    batch_wait_max_tokens_ratio: float = Field(
        0.0, ge=0, le=1, description="batch waiting (on only when this and batch_wait_timeout_iters are both > 0): "
        "contexts run once the iteration's tokens reach this share of max_num_tokens")
    # streaming (LLM API stream_interval, num_postprocess_workers)
    stream_interval: int = Field(
        1, ge=1, description="streaming: iterations between the executor's responses to the server")
    num_postprocess_workers: int = Field(
        0, ge=0, description="streaming: detokenizer processes of the server (0: its own process)")

    @property
    def first_chunk_delay_iters(self) -> int:
        """Decoding iterations a streaming request's first chunk waits past its first token."""
        return self.stream_interval - 1 if self.num_postprocess_workers == 0 else 0
