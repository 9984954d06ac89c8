"""vLLM's options and the deployment's facts as engines: vLLM's GPU-derived defaults, its
memory rule (``gpu_memory_utilization``) and one scheduler per worker or attention-DP rank."""

from __future__ import annotations

from servesim.engines.base import Engine, EngineLimits
from servesim.engines.planning import EnginePlan, PlanInputs
from servesim.engines.vllm.options import VLLMOptions, resolve_vllm_options
from servesim.metrics.recorder import RequestRecorder
from servesim.perf.memory import memory_budget
from servesim.perf.precision import layer_dtypes


def plan_vllm(options: VLLMOptions, facts: PlanInputs) -> EnginePlan:
    from servesim.engines.vllm.scheduler import VLLMEngine

    arch, gpu = facts.arch, facts.gpu
    opt = resolve_vllm_options(options, facts.gpu_gib, gpu.name, arch.max_position_embeddings)
    memory = memory_budget(arch, gpu, facts.layout, facts.kv_dtype, opt.gpu_memory_utilization, engine="vllm",
                           weight_dtype=facts.weight_dtype, max_running_requests=opt.max_num_seqs,
                           max_num_batched_tokens=opt.max_num_batched_tokens)
    settings = opt.model_dump()  # per rank: each DP engine core has its own seats and budget
    oracle = facts.oracle

    def make(worker_id: int, recorder: RequestRecorder, limits: EngineLimits) -> Engine:
        return VLLMEngine(worker_id, recorder, limits, opt, oracle)

    # expert parallelism: without data parallelism vLLM's FusedMoE runs each rank's experts over
    # the tensor-parallel batch through its expert map (remote experts -1) and all-reduces; with it,
    # the all2all manager (distributed/device_communicators/all2all.py) either gathers the ranks'
    # batches (AgRsAll2AllManager, the default, and the naive broadcast one) or dispatches routed
    # tokens (DeepEP, pplx, MoRI, NIXL-EP, FlashInfer's all-to-alls)
    lay = facts.layout
    a2a = lay.ep > 1 and lay.attention_dp > 1 and opt.all2all_backend not in ("allgather_reducescatter", "naive")
    return EnginePlan(memory, settings, opt.max_model_len, make, overlaps_host=opt.async_scheduling,
                      moe_all_to_all=a2a, moe_kernel=vllm_moe_kernel(opt, facts))


def vllm_moe_kernel(opt: VLLMOptions, facts: PlanInputs) -> str | None:
    """The fused-MoE kernel path off the format's default (perf/engine_kernels.py): Marlin's MoE
    for MXFP4 experts under ``VLLM_MXFP4_USE_MARLIN`` (``opt.mxfp4_use_marlin``; vLLM's
    ``get_mxfp4_backend``), else None."""
    if not (opt.mxfp4_use_marlin and facts.arch.is_moe):
        return None
    routed = layer_dtypes(facts.weight_dtype, facts.arch.family, facts.arch.is_moe)["routed_experts"]
    return "marlin" if routed == "mxfp4" else None
