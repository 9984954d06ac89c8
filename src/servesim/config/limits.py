"""Checks of a valid config that the schema alone cannot state: sizes a run can hold, and
choices that only make sense against the model and GPU (precision support, context length).

Sizes are checked as soon as the config is read, before a trace is opened or an output
folder touched, so that ``workload.num_requests: 1e12`` or ``deployment.workers: 1e9``
fail in milliseconds with the limit named, not minutes later by running out of memory.
docs/config.md ("Limits and checks") lists each limit and why it is where it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.errors import ConfigError
from servesim.metrics.columns import MAX_REQUESTS  # the recorder's bound, checked here up front

if TYPE_CHECKING:  # pragma: no cover
    from servesim.config.schema import Config, DeploymentConfig
    from servesim.hardware.gpu import GPUSpec
    from servesim.models.arch import ModelArch

#: Workers of one pool: each holds its own scheduler and KV-cache index, ~0.1-10 MB each
#: depending on the KV capacity (a 70B model on 8 x B200 under vLLM: ~10 MB a worker).
MAX_WORKERS = 1024
#: GPUs of the whole deployment (tp x attention_dp x workers, both pools when disaggregated).
MAX_GPUS = 65_536


def check_limits(cfg: "Config", source: str) -> None:
    """Raise a :class:`ConfigError` naming the key when a size exceeds what a run can hold, or
    when a value is valid for the schema but cannot mean anything (``output.dir: ""``)."""
    problems: list[str] = []
    w = cfg.workload
    if getattr(w, "kind", None) == "synthetic" and w.num_requests > MAX_REQUESTS:
        problems.append(_over("workload.num_requests", w.num_requests, MAX_REQUESTS, "requests",
                              "split the study into several runs"))
    if getattr(w, "kind", None) == "closed_loop":
        total = w.resolved_num_prompts + w.resolved_warmup
        if total > MAX_REQUESTS:
            problems.append(_over("workload.num_prompts (+ warmup)", total, MAX_REQUESTS, "requests",
                                  "split the study into several runs"))
    d = cfg.deployment
    pools = [("deployment", d.workers, d.tp, d.attention_dp)]
    if d.disaggregation is not None:
        pools = []
        for role in ("prefill", "decode"):
            pool = getattr(d.disaggregation, role)
            tp = pool.tp if pool.tp is not None else d.tp
            dp = pool.attention_dp if pool.attention_dp is not None else d.attention_dp
            pools.append((f"deployment.disaggregation.{role}", pool.workers, tp, dp))
    gpus = 0
    for key, workers, tp, dp in pools:
        if workers > MAX_WORKERS:
            problems.append(_over(f"{key}.workers", workers, MAX_WORKERS, "workers per pool",
                                  "simulate a representative slice of the fleet (the router spreads load "
                                  "evenly, so N workers at N x the traffic of one behave alike)"))
        gpus += workers * tp * dp
    if gpus > MAX_GPUS and not any("workers" in p for p in problems):
        problems.append(f"deployment: {gpus:,} GPUs (workers x tp x attention_dp) is above the limit of "
                        f"{MAX_GPUS:,} GPUs one run can simulate; lower deployment.workers or tp")
    if cfg.output.dir is not None and not cfg.output.dir.strip():
        problems.append("output.dir: expected an output folder name, got ''; use null (or --no-files) "
                        "to write no files")
    if problems:
        raise ConfigError(f"invalid config {source}:\n" + "\n".join(f"  {p}" for p in problems))


def _over(key: str, value: int, limit: int, unit: str, what_to_do: str) -> str:
    return f"{key}: {value:,} is above the limit of {limit:,} {unit} one run can hold; {what_to_do}"


#: The engine option that sets each engine's context length.
CONTEXT_KEYS = {"sglang": "context_length", "vllm": "max_model_len", "trtllm": "max_seq_len"}


def check_against_hardware(dep: "DeploymentConfig", arch: "ModelArch", gpu: "GPUSpec",
                           weight_dtype: str, key: str = "deployment") -> None:
    """Choices that the model or GPU rule out, each a :class:`ConfigError` naming the key.

    - 4-bit floating-point weights (``fp4`` = NVFP4) need fp4 tensor cores (NVIDIA Blackwell,
      AMD CDNA 4); without them servesim would price them faster than fp8 although no kernel
      runs them natively.  gpt-oss's MXFP4 is the exception: its experts run weight-only
      (dequantised to bf16) on older GPUs, as vLLM and SGLang do.  ``int4`` is weight-only
      everywhere.
    - an engine context length above the model's ``max_position_embeddings``: SGLang and
      vLLM refuse to start with one (unless an environment override is set), since the
      model was not trained for it.
    """
    from servesim.perf.precision import check_weight_precision

    problem = check_weight_precision(weight_dtype, gpu, arch.family)
    if problem:
        where = f"{key}.weight_dtype" if dep.weight_dtype else f"{key}.weight_dtype (from the model name)"
        raise ConfigError(f"{where}: {problem}")
    opt_key = CONTEXT_KEYS.get(dep.engine.name)
    asked = getattr(dep.engine, opt_key, None) if opt_key else None
    limit = arch.max_position_embeddings
    if asked is not None and limit and asked > limit:
        raise ConfigError(f"{key}.engine.{opt_key}: {asked:,} is above {arch.name}'s context length of "
                          f"{limit:,} tokens (max_position_embeddings); the engine refuses to start with it. "
                          f"Use at most {limit:,}, or leave it unset")


def deployment_warnings(dep: "DeploymentConfig", arch: "ModelArch", gpu: "GPUSpec") -> list[str]:
    """Accepted but noteworthy layouts, said in the summary's warning lines (never silent)."""
    out: list[str] = []
    gpus = dep.tp * dep.attention_dp
    domain = gpu.scale_up.domain_size
    if gpus > domain:
        nodes = -(-gpus // domain)
        out.append(f"deployment: a worker of {gpus} GPUs (tp {dep.tp} x attention_dp {dep.attention_dp}) spans "
                   f"{nodes} {gpu.name} scale-up domains of {domain}; its collectives are priced on the "
                   f"inter-node network ({gpu.scale_out.bandwidth_gbs:g} GB/s per GPU), not {gpu.scale_up.kind}")
    if dep.attention_dp > 1 and not arch.is_moe:
        out.append(f"deployment.attention_dp: {dep.attention_dp} on the dense model {arch.name}: attention runs "
                   f"in {dep.attention_dp} data-parallel ranks and every MLP tensor-parallel over all {gpus} GPUs "
                   "(SGLang's DP-attention layout); it is meant for MoE models, where experts dominate")
    return out
