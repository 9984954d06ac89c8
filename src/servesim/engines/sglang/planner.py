"""SGLang's options and the deployment's facts as engines: its GPU-derived defaults
(chunked prefill size, ``mem_fraction_static``), its adjustments for speculative decoding,
sparse-attention models and DP attention, and one scheduler per worker or rank."""

from __future__ import annotations

from servesim.engines.base import Engine, EngineLimits
from servesim.engines.planning import EnginePlan, PlanInputs
from servesim.engines.sglang.options import SGLangOptions
from servesim.errors import ConfigError
from servesim.metrics.recorder import RequestRecorder
from servesim.perf.memory import memory_budget

#: SGLang caps running requests at this many when speculative decoding is on and
#: ``--max-running-requests`` is not given (``server_args._handle_speculative_decoding``,
#: SGLang 0.5.9 and 0.5.10: EAGLE, EAGLE3, NEXTN, STANDALONE and NGRAM alike).
SGLANG_SPECULATIVE_MAX_RUNNING = 48


def default_chunked_prefill_size(gpu_memory_gib: float) -> int:
    """SGLang's choice of ``chunked_prefill_size`` from the GPU's memory (server_args.py)."""
    mib = gpu_memory_gib * 1024
    if mib < 35 * 1024:
        return 2048
    if mib < 60 * 1024:
        return 4096
    if mib < 160 * 1024:
        return 8192
    return 16384


def default_mem_fraction_static(gpu_memory_gib: float, chunked_prefill_size: int, tp: int,
                                cuda_graph_max_bs: int | None = None) -> float:
    """SGLang's default ``mem_fraction_static``: leave a reserve for activations and graphs."""
    mib = gpu_memory_gib * 1024
    if cuda_graph_max_bs is None:
        cuda_graph_max_bs = 512 if mib >= 160 * 1024 else (256 if tp < 4 else 512)
    reserved = 512 + max(chunked_prefill_size, 2048) * 1.5 + cuda_graph_max_bs * 2 + tp / 8 * 1024
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mib - reserved) / mib, 3)


def plan_sglang(options: SGLangOptions, facts: PlanInputs) -> EnginePlan:
    from servesim.engines.sglang.scheduler import SGLangEngine

    arch, gpu, layout, oracle = facts.arch, facts.gpu, facts.layout, facts.oracle
    opt = options
    if facts.speculative and opt.max_running_requests is None:
        opt = opt.model_copy(update={"max_running_requests": SGLANG_SPECULATIVE_MAX_RUNNING})
    if facts.speculative:
        # SGLang 0.5.x (server_args) runs EAGLE/MTP without the overlap scheduler unless spec v2 is enabled
        opt = opt.model_copy(update={"disable_overlap_schedule": True})
    if arch.index_topk and gpu.vendor == "nvidia" and opt.page_size != 64:
        # SGLang forces 64-token pages for DeepSeek-sparse-attention models on CUDA (its
        # server_args model adjustments; ROCm keeps 1), whatever --page-size says.
        opt = opt.model_copy(update={"page_size": 64})
    dp = layout.attention_dp
    gpu_gib = facts.gpu_gib
    if opt.chunked_prefill_size is None:
        chunk: int | None = default_chunked_prefill_size(gpu_gib)
    elif opt.chunked_prefill_size <= 0:
        chunk = None
    else:
        chunk = opt.chunked_prefill_size
    mem_fraction = opt.mem_fraction_static or default_mem_fraction_static(
        gpu_gib, chunk or opt.max_prefill_tokens, layout.tp)
    if dp > 1 and opt.scheduler_recv_interval > 1:
        raise ConfigError("deployment.engine.scheduler_recv_interval: SGLang supports a receive interval "
                          f"above 1 only without DP attention (attention_dp is {dp}); set it to 1")
    if dp > 1:
        # SGLang with DP attention (server_args._handle_data_parallelism, scheduler): the
        # chunk size and max_running_requests are totals split over the ranks, and the
        # schedule is made more conservative; max_prefill_tokens stays per rank.
        chunk = max(1, chunk // dp) if chunk else chunk
        update = {"schedule_conservativeness": opt.schedule_conservativeness * 0.3}
        if opt.max_running_requests is not None:
            update["max_running_requests"] = max(1, opt.max_running_requests // dp)
        opt = opt.model_copy(update=update)
    memory = memory_budget(arch, gpu, layout, facts.kv_dtype, mem_fraction, engine="sglang",
                           weight_dtype=facts.weight_dtype, max_running_requests=opt.max_running_requests or 256,
                           max_num_batched_tokens=chunk or opt.max_prefill_tokens)
    context = opt.context_length or arch.max_position_embeddings
    settings = {"name": "sglang", "chunked_prefill_size": chunk, "mem_fraction_static": mem_fraction,
                "max_prefill_tokens": opt.max_prefill_tokens, "page_size": opt.page_size,
                "schedule_policy": opt.schedule_policy, "context_length": context,
                "disable_radix_cache": opt.disable_radix_cache,
                "scheduler_recv_interval": opt.scheduler_recv_interval,
                "disable_overlap_schedule": opt.disable_overlap_schedule}

    def make(worker_id: int, recorder: RequestRecorder, limits: EngineLimits) -> Engine:
        eng = SGLangEngine(worker_id, recorder, limits, opt, chunk, oracle=oracle)
        settings["max_running_requests"] = eng.max_running
        return eng

    # expert parallelism without --moe-a2a-backend: SGLang's StandardDispatcher (layers/moe/
    # token_dispatcher/standard.py) hands the fused MoE the layer's whole batch (with DP attention
    # the ranks' tokens gathered before the MLP), remote experts' ids mapped to -1 for the Triton
    # runner or left global for the FlashInfer runners, which skip them inside the kernel; DeepEP
    # and the other a2a backends send each rank only its routed tokens
    return EnginePlan(memory, settings, context, make, eager_launch=not opt.enable_piecewise_cuda_graph,
                      overlaps_host=not opt.disable_overlap_schedule,
                      moe_all_to_all=layout.ep > 1 and opt.moe_a2a_backend != "none")
