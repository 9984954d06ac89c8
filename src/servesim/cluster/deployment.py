"""From the ``deployment`` config to workers: model, GPU, memory, step time and engines.

Everything that can be wrong with a deployment (an unknown model, tp that does not divide
the heads, weights that do not fit) is found here, before the run, and reported with the
config key to change.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from servesim.cluster.kv_index import KVIndex
from servesim.cluster.kv_publish import kv_index_for, wire_kv_events
from servesim.cluster.routers import Router, build_router
from servesim.cluster.worker import Worker
from servesim.config.limits import check_against_hardware
from servesim.config.load import config_base_dir
from servesim.config.schema import Config, DeploymentConfig
from servesim.engines.attention_dp import AttentionDPEngine
from servesim.engines.base import Engine, EngineLimits
from servesim.engines.planning import PlanInputs
from servesim.engines.registry import plan_engine
from servesim.errors import ConfigError, ModelError
from servesim.hardware.gpu import GPUSpec, load_gpu
from servesim.input_paths import input_path
from servesim.kvcache.events import KVEvent
from servesim.kvcache.policies import NextUseOracle
from servesim.metrics.recorder import RequestRecorder
from servesim.models.arch import ModelArch, load_model
from servesim.perf.config import ResolvedPerf, build_step_time, resolve_perf
from servesim.perf.frontend import Frontend, FrontendParams
from servesim.perf.memory import Layout, MemoryBudget
from servesim.perf.plan import StepTimeModel


def infer_weight_dtype(model_name: str, arch: ModelArch) -> str:
    """Weight precision implied by a checkpoint's name (e.g. ``-FP8``, ``-NVFP4``), else bf16."""
    low = model_name.lower()
    if "nvfp4" in low or "mxfp4" in low or low.endswith("-fp4") or "-fp4-" in low:  # -FP4, -FP4-v2
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
        self.kv_index = kv_index_for(c.router, c.router_options, c.kv_event_delay_s)
        workers = []
        for i in range(c.workers):
            engine = self.engine_factory(i, recorder)
            wire_kv_events(engine, i, self.kv_index, kv_event_log)
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


def _resolve_model(cfg: DeploymentConfig, base_dir: Path | None = None) -> ModelArch:
    try:
        return load_model(input_path(cfg.model, base_dir))
    except ModelError as exc:
        raise ConfigError(f"deployment.model: {exc}") from None


def _resolve_gpu(cfg: DeploymentConfig, base_dir: Path | None = None) -> GPUSpec:
    try:
        return load_gpu(input_path(cfg.gpu, base_dir))
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


def build_deployment(cfg: Config, oracle: NextUseOracle | None = None) -> Deployment:
    """Resolve the deployment section: every error names the config key to change.

    ``oracle`` (future block uses of the workload) is required by the ``belady`` policy.
    """
    dep = cfg.deployment
    if dep.disaggregation is not None:  # prefill and decode pools joined by a KV link
        from servesim.cluster.disagg import build_disaggregated

        return build_disaggregated(cfg, build_deployment, oracle)
    base_dir = config_base_dir(cfg)
    arch = _resolve_model(dep, base_dir)
    gpu = _resolve_gpu(dep, base_dir)
    _check_layout(dep, arch)
    weight_dtype = dep.weight_dtype or infer_weight_dtype(dep.model, arch)
    check_against_hardware(dep, arch, gpu, weight_dtype)  # precision support, context length
    kv_dtype = dep.kv_dtype or default_kv_dtype(dep.engine.name, arch, gpu)
    dp = dep.attention_dp
    layout = Layout(tp=dep.tp, ep=dep.ep, attention_dp=dp)
    if dp > 1 and getattr(dep.engine, "host_kv_gb", 0):  # the worker's host KV tier, shared out per rank
        dep = dep.model_copy(update={"engine": dep.engine.model_copy(
            update={"host_kv_gb": dep.engine.host_kv_gb / dp})})
    try:
        facts = PlanInputs(arch, gpu, layout, weight_dtype, kv_dtype, oracle, speculative=dep.speculative is not None)
        plan = plan_engine(dep.engine, facts)
    except ModelError as exc:
        raise ConfigError(f"deployment: {exc}") from None
    # Attention DP: each rank's engine has one rank's KV pool (engines/attention_dp.py).
    limits = EngineLimits(kv_capacity_tokens=plan.memory.kv_tokens, context_length=plan.context,
                          kv_bytes_per_token=plan.memory.kv_bytes_per_token, kv_shards=dep.tp,
                          gpu_name=gpu.name)
    perf = resolve_perf(cfg.perf, gpu.name, dep.engine.name, base_dir, model=dep.model,
                        precision=weight_dtype, client=getattr(cfg, "client", None))
    try:
        step_time = build_step_time(cfg.perf, arch, gpu, dep.tp, dep.ep, weight_dtype, kv_dtype,
                                    attention_dp=dp, engine=dep.engine.name, resolved=perf,
                                    eager_launch=plan.eager_launch, moe_all_to_all=plan.moe_all_to_all,
                                    moe_kernel=plan.moe_kernel, graph_pass_overhead_s=plan.graph_pass_overhead_s)
    except ModelError as exc:
        raise ConfigError(f"perf: {exc}") from None
    from servesim.engines.speculative import attach_speculative, wrap_step_time as wrap_speculative

    step_time = wrap_speculative(step_time, dep.speculative)  # draft cost of speculative passes
    # the scheduler's CPU time per pass (frontend): serial, or hidden behind the GPU's up to its
    # length where the engine's loop overlaps the two
    step_time = Frontend(perf.frontend).wrap_step_time(step_time, overlapped=plan.overlaps_host)

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
