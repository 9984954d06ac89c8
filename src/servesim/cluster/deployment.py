"""From the ``deployment`` config to workers: model, GPU, memory, step time and engines.

Everything that can be wrong with a deployment (an unknown model, tp that does not divide
the heads, weights that do not fit) is found here, before the run, and reported with the
config key to change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from servesim.cluster.kv_index import KVIndex
from servesim.cluster.routers import Router, build_router
from servesim.cluster.worker import Worker
from servesim.config.schema import Config, DeploymentConfig
from servesim.engines.attention_dp import AttentionDPEngine
from servesim.engines.base import Engine, EngineLimits
from servesim.errors import ConfigError, ModelError
from servesim.hardware.gpu import GPUSpec, load_gpu
from servesim.kvcache.events import KVEvent
from servesim.kvcache.policies import NextUseOracle
from servesim.metrics.recorder import RequestRecorder
from servesim.models.arch import ModelArch, load_model
from servesim.perf.config import ResolvedPerf, build_step_time, resolve_perf
from servesim.perf.frontend import Frontend, FrontendParams
from servesim.perf.memory import Layout, MemoryBudget, memory_budget
from servesim.perf.plan import StepTimeModel


def infer_weight_dtype(model_name: str, arch: ModelArch) -> str:
    """Weight precision implied by a checkpoint's name (e.g. ``-FP8``, ``-NVFP4``), else bf16."""
    low = model_name.lower()
    if "nvfp4" in low or "mxfp4" in low or low.endswith("-fp4"):
        return "fp4"
    if "fp8" in low:
        return "fp8"
    quant = getattr(arch, "quantization", None)
    if quant:
        return str(quant)
    return "bf16"


@dataclass
class Deployment:
    """A resolved deployment: what each worker is, and how to build it."""

    cfg: DeploymentConfig
    arch: ModelArch
    gpu: GPUSpec
    weight_dtype: str
    kv_dtype: str
    memory: MemoryBudget
    step_time: StepTimeModel
    engine_factory: Callable[[int, RequestRecorder], Engine]
    engine_settings: dict
    kv_index: KVIndex | None = None
    #: the perf section resolved for this deployment (calibration group, frontend)
    perf: ResolvedPerf | None = None
    #: Future block uses for the belady eviction policy (None for other policies).
    oracle: NextUseOracle | None = None

    @property
    def gpus_per_worker(self) -> int:
        return self.cfg.tp * self.cfg.attention_dp

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_worker * self.cfg.workers

    @property
    def kv_capacity_tokens(self) -> int:
        """KV tokens of one worker (all its attention-DP ranks together)."""
        return self.memory.kv_tokens * self.cfg.attention_dp

    @property
    def frontend_params(self) -> FrontendParams:
        return self.perf.frontend if self.perf is not None else FrontendParams.zero()

    def make_frontend(self) -> Frontend | None:
        """A fresh (stateful) frontend for one run; None when every stage is zero."""
        fe = Frontend(self.frontend_params)
        return None if fe.is_zero else fe

    def make_workers(self, recorder: RequestRecorder, fast_forward: bool = True,
                     kv_event_log: Callable[[KVEvent], None] | None = None) -> list[Worker]:
        """Build the workers, publishing each cache's KV events to whoever consumes them.

        Consumers: the KV index of a KV-aware router, and ``kv_event_log`` (kv_events.jsonl).
        """
        c = self.cfg
        needs_index = c.router == "kv_aware" or c.router_options.get("fallback") == "kv_aware"
        self.kv_index = KVIndex(c.kv_event_delay_s) if needs_index else None
        workers = []
        for i in range(c.workers):
            engine = self.engine_factory(i, recorder)
            sinks = []
            if self.kv_index is not None:
                self.kv_index.hash_block_size = getattr(engine, "bs", self.kv_index.hash_block_size)
                sinks.append(self.kv_index.sink(i))
            if kv_event_log is not None:
                sinks.append(kv_event_log)
            if sinks:
                _publish_kv_events(engine, i, sinks)
            workers.append(Worker(i, engine, self.step_time, self.gpus_per_worker, fast_forward))
        return workers

    def make_router(self, seed: int) -> Router:
        """The router; call after :meth:`make_workers`, which builds the KV index it may read."""
        try:
            return build_router(self.cfg.router, seed, self.cfg.router_options, self.kv_index)
        except ValueError as exc:
            raise ConfigError(f"deployment.router_options: {exc}") from None

    def describe(self) -> dict:
        """Derived facts shown in prediction.json (what the engine settings resolved to)."""
        m = self.memory
        return {
            "model": self.arch.name,
            "gpu": self.gpu.name,
            "weight_dtype": self.weight_dtype,
            "kv_dtype": self.kv_dtype,
            "gpus_per_worker": self.gpus_per_worker,
            "attention_dp": self.cfg.attention_dp,
            "total_gpus": self.total_gpus,
            "weights_gb_per_gpu": m.weights_bytes / 1e9,
            "kv_bytes_per_token": m.kv_bytes_per_token,
            "kv_capacity_tokens_per_worker": self.kv_capacity_tokens,
            "kv_capacity_tokens_per_rank": self.memory.kv_tokens,
            "engine_settings": self.engine_settings,
            "perf": self.perf.describe() if self.perf is not None else None,
        }


def _publish_kv_events(engine: Engine, worker_id: int, sinks: list[Callable[[KVEvent], None]]) -> None:
    """Stamp each event of the engine's cache with the worker and virtual time, and fan it out.

    An attention-DP engine publishes every rank's cache under the worker's id (routers see
    the worker, not its ranks).
    """
    for rank in getattr(engine, "ranks", None) or [engine]:
        _publish_cache_events(rank, worker_id, sinks)


def _publish_cache_events(engine: Engine, worker_id: int, sinks: list[Callable[[KVEvent], None]]) -> None:
    # SGLang keeps a radix tree; vLLM and TensorRT-LLM a hashed block pool.
    cache = engine.tree if hasattr(engine, "tree") else engine.pool

    def publish(ev: KVEvent) -> None:
        stamped = ev.stamped(cache.now, worker_id)
        for sink in sinks:
            sink(stamped)

    cache.on_event = publish


def _resolve_model(cfg: DeploymentConfig) -> ModelArch:
    try:
        return load_model(cfg.model)
    except ModelError as exc:
        raise ConfigError(f"deployment.model: {exc}") from None


def _resolve_gpu(cfg: DeploymentConfig) -> GPUSpec:
    try:
        return load_gpu(cfg.gpu)
    except ModelError as exc:
        raise ConfigError(f"deployment.gpu: {exc}") from None


def _check_layout(cfg: DeploymentConfig, arch: ModelArch) -> None:
    heads = arch.num_attention_heads
    if heads % cfg.tp:
        raise ConfigError(f"deployment.tp: {cfg.tp} does not divide the {heads} attention heads of "
                          f"{arch.name}; expected a divisor of {heads}")
    gpus = cfg.tp * cfg.attention_dp
    if gpus % cfg.ep:
        raise ConfigError(f"deployment.ep: {cfg.ep} must divide the worker's GPUs "
                          f"tp × attention_dp = {cfg.tp} × {cfg.attention_dp} = {gpus}")
    if cfg.ep > 1 and not arch.is_moe:
        raise ConfigError(f"deployment.ep: {arch.name} is a dense model; expert parallelism needs an MoE model")


@dataclass
class _EnginePlan:
    """What one engine kind contributes: its memory rule, settings and engine factory."""

    memory: MemoryBudget
    settings: dict
    context: int
    make: Callable[[int, RequestRecorder, EngineLimits], Engine]


def default_kv_dtype(engine: str, arch: ModelArch, gpu: GPUSpec) -> str:
    """The KV-cache precision an engine picks when the user leaves it on "auto".

    SGLang stores the KV of DeepSeek-sparse-attention models (DeepSeek-V3.2, GLM-5: an
    ``index_topk`` indexer) in fp8 on compute capability 10 and above, bf16 below
    (``server_args._set_default_nsa_kv_cache_dtype``, SGLang 0.5.x).  Everything else
    defaults to the model's activation precision, bf16 here.
    """
    if engine == "sglang" and arch.index_topk and (gpu.cuda_major or 0) >= 10:
        return "fp8"
    return "bf16"


#: SGLang caps running requests at this many when speculative decoding is on and
#: ``--max-running-requests`` is not given (``server_args._handle_speculative_decoding``,
#: SGLang 0.5.9 and 0.5.10: EAGLE, EAGLE3, NEXTN, STANDALONE and NGRAM alike).
SGLANG_SPECULATIVE_MAX_RUNNING = 48


def _plan_sglang(dep: DeploymentConfig, arch: ModelArch, gpu: GPUSpec, layout: Layout,
                 weight_dtype: str, kv_dtype: str, oracle=None) -> _EnginePlan:
    from servesim.engines.sglang import SGLangEngine, default_chunked_prefill_size, default_mem_fraction_static

    opt = dep.engine
    if dep.speculative is not None and opt.max_running_requests is None:
        opt = opt.model_copy(update={"max_running_requests": SGLANG_SPECULATIVE_MAX_RUNNING})
    if dep.speculative is not None:
        # SGLang 0.5.x (server_args) runs EAGLE/MTP without the overlap scheduler unless spec v2 is enabled
        opt = opt.model_copy(update={"disable_overlap_schedule": True})
    if arch.index_topk and gpu.vendor == "nvidia" and opt.page_size != 64:
        # SGLang forces 64-token pages for DeepSeek-sparse-attention models on CUDA (its
        # server_args model adjustments; ROCm keeps 1), whatever --page-size says.
        opt = opt.model_copy(update={"page_size": 64})
    dp = layout.attention_dp
    gpu_gib = gpu.memory_bytes / 2**30
    if opt.chunked_prefill_size is None:
        chunk: int | None = default_chunked_prefill_size(gpu_gib)
    elif opt.chunked_prefill_size <= 0:
        chunk = None
    else:
        chunk = opt.chunked_prefill_size
    mem_fraction = opt.mem_fraction_static or default_mem_fraction_static(
        gpu_gib, chunk or opt.max_prefill_tokens, dep.tp)
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
    memory = memory_budget(arch, gpu, layout, kv_dtype, mem_fraction, engine="sglang",
                           weight_dtype=weight_dtype, max_running_requests=opt.max_running_requests or 256,
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

    return _EnginePlan(memory, settings, context, make)


def _plan_vllm(dep: DeploymentConfig, arch: ModelArch, gpu: GPUSpec, layout: Layout,
               weight_dtype: str, kv_dtype: str, oracle=None) -> _EnginePlan:
    from servesim.engines.vllm import VLLMEngine
    from servesim.engines.vllm_options import resolve_vllm_options

    opt = resolve_vllm_options(dep.engine, gpu.memory_bytes / 2**30, gpu.name, arch.max_position_embeddings)
    memory = memory_budget(arch, gpu, layout, kv_dtype, opt.gpu_memory_utilization, engine="vllm",
                           weight_dtype=weight_dtype, max_running_requests=opt.max_num_seqs,
                           max_num_batched_tokens=opt.max_num_batched_tokens)
    settings = opt.model_dump()  # per rank: each DP engine core has its own seats and budget

    def make(worker_id: int, recorder: RequestRecorder, limits: EngineLimits) -> Engine:
        return VLLMEngine(worker_id, recorder, limits, opt, oracle)

    return _EnginePlan(memory, settings, opt.max_model_len, make)


def _plan_trtllm(dep: DeploymentConfig, arch: ModelArch, gpu: GPUSpec, layout: Layout,
                 weight_dtype: str, kv_dtype: str, oracle=None) -> _EnginePlan:
    from servesim.engines.trtllm import TRTLLMEngine

    opt = dep.engine
    memory = memory_budget(arch, gpu, layout, kv_dtype, opt.free_gpu_memory_fraction, engine="trtllm",
                           weight_dtype=weight_dtype, max_running_requests=min(opt.max_batch_size, 2048),
                           max_num_batched_tokens=opt.max_num_tokens)
    context = opt.max_seq_len or arch.max_position_embeddings
    settings = opt.model_dump() | {"max_seq_len": context}  # per attention-DP rank

    def make(worker_id: int, recorder: RequestRecorder, limits: EngineLimits) -> Engine:
        return TRTLLMEngine(worker_id, recorder, limits, opt, oracle)

    return _EnginePlan(memory, settings, context, make)


ENGINE_PLANNERS = {"sglang": _plan_sglang, "vllm": _plan_vllm, "trtllm": _plan_trtllm}


def build_deployment(cfg: Config, oracle: NextUseOracle | None = None) -> Deployment:
    """Resolve the deployment section: every error names the config key to change.

    ``oracle`` (future block uses of the workload) is required by the ``belady`` policy.
    """
    dep = cfg.deployment
    if dep.disaggregation is not None:  # prefill and decode pools joined by a KV link
        from servesim.cluster.disagg import build_disaggregated

        return build_disaggregated(cfg, oracle)
    arch = _resolve_model(dep)
    gpu = _resolve_gpu(dep)
    _check_layout(dep, arch)
    weight_dtype = dep.weight_dtype or infer_weight_dtype(dep.model, arch)
    kv_dtype = dep.kv_dtype or default_kv_dtype(dep.engine.name, arch, gpu)
    dp = dep.attention_dp
    layout = Layout(tp=dep.tp, ep=dep.ep, attention_dp=dp)
    if dp > 1 and getattr(dep.engine, "host_kv_gb", 0):  # the worker's host KV tier, shared out per rank
        dep = dep.model_copy(update={"engine": dep.engine.model_copy(
            update={"host_kv_gb": dep.engine.host_kv_gb / dp})})
    try:
        plan = ENGINE_PLANNERS[dep.engine.name](dep, arch, gpu, layout, weight_dtype, kv_dtype, oracle)
    except ModelError as exc:
        raise ConfigError(f"deployment: {exc}") from None
    # Attention DP: each rank's engine has one rank's KV pool (engines/attention_dp.py).
    limits = EngineLimits(kv_capacity_tokens=plan.memory.kv_tokens, context_length=plan.context,
                          kv_bytes_per_token=plan.memory.kv_bytes_per_token, kv_shards=dep.tp,
                          gpu_name=gpu.name)
    from servesim.config.load import config_base_dir

    perf = resolve_perf(cfg.perf, gpu.name, dep.engine.name, config_base_dir(cfg), model=dep.model,
                        precision=weight_dtype, client=getattr(cfg, "client", None))
    try:
        step_time = build_step_time(cfg.perf, arch, gpu, dep.tp, dep.ep, weight_dtype, kv_dtype,
                                    attention_dp=dp, engine=dep.engine.name, resolved=perf)
    except ModelError as exc:
        raise ConfigError(f"perf: {exc}") from None
    from servesim.engines.speculative import attach_speculative, wrap_step_time as wrap_speculative

    step_time = wrap_speculative(step_time, dep.speculative)  # draft cost of speculative passes
    # the scheduler's CPU time per pass (frontend), unless the engine overlaps it
    step_time = Frontend(perf.frontend).wrap_step_time(step_time)

    def factory(worker_id: int, recorder: RequestRecorder) -> Engine:
        if dp > 1:  # one scheduler and KV cache per attention rank, run in lock-step
            ranks = [plan.make(worker_id, recorder, limits) for _ in range(dp)]
            placement = getattr(dep.engine, "load_balance_method", None)  # SGLang's option; else the engine's rule
            eng: Engine = AttentionDPEngine(worker_id, recorder, limits, ranks, placement)
        else:
            eng = plan.make(worker_id, recorder, limits)
        if dep.speculative is not None:  # acceptance drawn from the run's seed and the worker id
            attach_speculative(eng, dep.speculative, cfg.seed, worker_id)
        return eng

    return Deployment(cfg=dep, arch=arch, gpu=gpu, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                      memory=plan.memory, step_time=step_time, engine_factory=factory,
                      engine_settings=plan.settings, perf=perf, oracle=oracle)
