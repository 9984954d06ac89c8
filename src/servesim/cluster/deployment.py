"""From the ``deployment`` config to workers: model, GPU, memory, step time and engines.

Everything that can be wrong with a deployment (an unknown model, tp that does not divide
the heads, weights that do not fit) is found here, before the run, and reported with the
config key to change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from servesim.cluster.routers import Router, build_router
from servesim.cluster.worker import Worker
from servesim.config.schema import Config, DeploymentConfig
from servesim.engines.base import Engine, EngineLimits
from servesim.errors import ConfigError, ModelError
from servesim.hardware.gpu import GPUSpec, load_gpu
from servesim.metrics.recorder import RequestRecorder
from servesim.models.arch import ModelArch, load_model
from servesim.perf.config import build_step_time
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

    @property
    def gpus_per_worker(self) -> int:
        return self.cfg.tp

    @property
    def total_gpus(self) -> int:
        return self.cfg.tp * self.cfg.workers

    @property
    def kv_capacity_tokens(self) -> int:
        return self.memory.kv_tokens

    def make_workers(self, recorder: RequestRecorder, fast_forward: bool = True) -> list[Worker]:
        return [Worker(i, self.engine_factory(i, recorder), self.step_time, self.gpus_per_worker, fast_forward)
                for i in range(self.cfg.workers)]

    def make_router(self, seed: int) -> Router:
        return build_router(self.cfg.router, seed)

    def describe(self) -> dict:
        """Derived facts shown in prediction.json (what the engine settings resolved to)."""
        m = self.memory
        return {
            "model": self.arch.name,
            "gpu": self.gpu.name,
            "weight_dtype": self.weight_dtype,
            "kv_dtype": self.kv_dtype,
            "gpus_per_worker": self.gpus_per_worker,
            "total_gpus": self.total_gpus,
            "weights_gb_per_gpu": m.weights_bytes / 1e9,
            "kv_bytes_per_token": m.kv_bytes_per_token,
            "kv_capacity_tokens_per_worker": m.kv_tokens,
            "engine_settings": self.engine_settings,
        }


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
    if cfg.tp % cfg.ep:
        raise ConfigError(f"deployment.ep: {cfg.ep} must divide tp={cfg.tp} (the worker's GPUs)")
    if cfg.ep > 1 and not arch.is_moe:
        raise ConfigError(f"deployment.ep: {arch.name} is a dense model; expert parallelism needs an MoE model")


def build_deployment(cfg: Config) -> Deployment:
    dep = cfg.deployment
    arch = _resolve_model(dep)
    gpu = _resolve_gpu(dep)
    _check_layout(dep, arch)
    weight_dtype = dep.weight_dtype or infer_weight_dtype(dep.model, arch)
    kv_dtype = dep.kv_dtype or "bf16"
    layout = Layout(tp=dep.tp, ep=dep.ep)
    gpu_gib = gpu.memory_bytes / 2**30
    opt = dep.engine
    from servesim.engines.sglang import SGLangEngine, default_chunked_prefill_size, default_mem_fraction_static

    if opt.chunked_prefill_size is None:
        chunk: int | None = default_chunked_prefill_size(gpu_gib)
    elif opt.chunked_prefill_size <= 0:
        chunk = None
    else:
        chunk = opt.chunked_prefill_size
    mem_fraction = opt.mem_fraction_static or default_mem_fraction_static(gpu_gib, chunk or opt.max_prefill_tokens, dep.tp)
    try:
        memory = memory_budget(arch, gpu, layout, kv_dtype, mem_fraction, engine="sglang",
                               weight_dtype=weight_dtype, max_running_requests=opt.max_running_requests or 256,
                               max_num_batched_tokens=chunk or opt.max_prefill_tokens)
    except ModelError as exc:
        raise ConfigError(f"deployment: {exc}") from None
    context = opt.context_length or arch.max_position_embeddings
    limits = EngineLimits(kv_capacity_tokens=memory.kv_tokens, context_length=context)
    try:
        step_time = build_step_time(cfg.perf, arch, gpu, dep.tp, dep.ep, weight_dtype, kv_dtype)
    except ModelError as exc:
        raise ConfigError(f"perf: {exc}") from None
    settings = {"name": "sglang", "chunked_prefill_size": chunk, "mem_fraction_static": mem_fraction,
                "max_prefill_tokens": opt.max_prefill_tokens, "page_size": opt.page_size,
                "schedule_policy": opt.schedule_policy, "context_length": context}

    def factory(worker_id: int, recorder: RequestRecorder) -> Engine:
        eng = SGLangEngine(worker_id, recorder, limits, opt, chunk)
        settings["max_running_requests"] = eng.max_running
        return eng

    return Deployment(cfg=dep, arch=arch, gpu=gpu, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                      memory=memory, step_time=step_time, engine_factory=factory, engine_settings=settings)
