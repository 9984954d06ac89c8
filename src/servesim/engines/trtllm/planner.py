"""TensorRT-LLM's options and the deployment's facts as engines: its memory rule
(``free_gpu_memory_fraction``), context length and one executor per worker or rank."""

from __future__ import annotations

from servesim.engines.base import Engine, EngineLimits
from servesim.engines.planning import EnginePlan, PlanInputs
from servesim.engines.trtllm.options import TRTLLMOptions
from servesim.metrics.recorder import RequestRecorder
from servesim.perf.memory import memory_budget


def plan_trtllm(options: TRTLLMOptions, facts: PlanInputs) -> EnginePlan:
    from servesim.engines.trtllm.scheduler import TRTLLMEngine

    opt = options
    arch = facts.arch
    memory = memory_budget(arch, facts.gpu, facts.layout, facts.kv_dtype, opt.free_gpu_memory_fraction,
                           engine="trtllm", weight_dtype=facts.weight_dtype,
                           max_running_requests=min(opt.max_batch_size, 2048),
                           max_num_batched_tokens=opt.max_num_tokens)
    context = opt.max_seq_len or arch.max_position_embeddings
    settings = opt.model_dump() | {"max_seq_len": context}  # per attention-DP rank
    oracle = facts.oracle

    def make(worker_id: int, recorder: RequestRecorder, limits: EngineLimits) -> Engine:
        return TRTLLMEngine(worker_id, recorder, limits, opt, oracle)

    # eager_launch stays False: TensorRT-LLM's PyTorch backend runs a layer through fused custom
    # ops (attention with RoPE and the KV write, the fused MoE, all-reduce fused with the norm), so
    # the per-operation dispatch perf/launches.py counts from SGLang's model code does not carry
    # over (applied to TensorRT-LLM it made Llama and Qwen predictions worse; docs/validation.md).
    return EnginePlan(memory, settings, context, make, moe_all_to_all=trtllm_moe_alltoall(opt, facts),
                      moe_kernel=TRTLLM_MOE_KERNELS.get(opt.moe_backend), graph_pass_overhead_s=TRTLLM_GRAPH_PASS_S)


#: A CUDA-graph decode iteration's time beyond the layers' kernels in TensorRT-LLM's PyTorch
#: executor: the graph replay's launch, the pinned input copies, greedy sampling (an arg-max over
#: the logits) and the sampled ids' copy back, about a dozen small operations at a few
#: microseconds each (the GPUs' shortest kernels take 1.8-2.5 us: ``GPUSpec.kernel_latency_us``).
#: Its executor's overlap scheduler (on in every measured launch script) prepares iteration k + 1
#: and handles iteration k − 1's responses on the host while iteration k runs, so no host time
#: adds to it.  With the op model's default (0.5 ms, kept for vLLM and SGLang, whose Python model
#: runners launch the input preparation and sampler op by op) every TensorRT-LLM calibration group
#: fitted its scheduler time at zero, the bottom of its range: the floor was priced too high (they
#: still do with 50 us: more of it is; docs/physics.md, "What a decode pass costs beyond its layers").
TRTLLM_GRAPH_PASS_S = 50e-6


#: ``moe_config.backend`` → the kernel path of its fused MoE (perf/engine_kernels.py:MOE_KERNEL_PATHS):
#: CUTLASS's grouped GEMMs, the TRTLLM backend's TensorRT-LLM-generated kernels (on Blackwell;
#: aiconfigurator's TensorRT-LLM tables time them as ``moe_torch_flow_min_latency``), or DeepGEMM's
#: grouped GEMMs (what the block-fp8 tables time on Blackwell).  The other backends take the rates
#: of the experts' format.
TRTLLM_MOE_KERNELS = {"CUTLASS": "cutlass", "TRTLLM": "trtllm", "DEEPGEMM": "deepgemm"}


def trtllm_moe_alltoall(opt: TRTLLMOptions, facts: PlanInputs) -> bool:
    """Whether TensorRT-LLM's fused MoE gets its tokens by all-to-all (``opt.moe_alltoall``, or
    TensorRT-LLM's own choice where None).

    Without attention DP every rank holds the whole batch and its MoE kernel permutes only its
    own experts' rows (the remote ones masked).  With attention DP,
    ``TRTLLMGenFusedMoE.select_alltoall_method_type`` (``_torch/modules/fused_moe/``) picks its
    NVLink all-to-all when the MoE is not tensor-parallel and ``MnnvlMemory.supports_mnnvl()``
    holds (every NVLink of the GPU up: an NVSwitch board or an NVL72 rack), else the
    all-gather / reduce-scatter path, which hands each rank the whole gathered batch.
    """
    lay = facts.layout
    if lay.ep <= 1 or lay.attention_dp <= 1:
        return False
    if opt.moe_alltoall is not None:
        return opt.moe_alltoall
    link = facts.gpu.scale_up
    return lay.moe_tp == 1 and link.kind == "nvlink" and lay.gpus <= link.domain_size
