"""The fleet of a deployment as pools of identical workers (one pool, or prefill + decode).

Cost and energy price each pool by its own GPU; this module is the one place that knows how
an aggregated and a disaggregated deployment lay out their workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Pool:
    """Workers of one kind: their GPU, model and the run's workers (with busy time and tokens)."""

    name: str
    gpu: Any  # hardware.gpu.GPUSpec
    arch: Any  # models.arch.ModelArch
    weight_dtype: str
    gpus_per_worker: int
    workers: list

    @property
    def gpus(self) -> int:
        return self.gpus_per_worker * len(self.workers)


def fleet_pools(deployment, workers: list) -> list[Pool]:
    """Split the run's workers into pools; ``deployment`` is a Deployment or DisaggDeployment."""
    if hasattr(deployment, "prefill") and hasattr(deployment, "decode"):
        n = deployment.prefill.cfg.workers
        parts = (("prefill", deployment.prefill, workers[:n]), ("decode", deployment.decode, workers[n:]))
    else:
        parts = (("workers", deployment, list(workers)),)
    return [Pool(name, d.gpu, d.arch, d.weight_dtype, d.gpus_per_worker, ws) for name, d, ws in parts]


def pool_gpus(deployment) -> list[tuple[str, Any, int]]:
    """(pool name, GPUSpec, GPUs) without a run: what a sweep needs before simulating."""
    if hasattr(deployment, "prefill") and hasattr(deployment, "decode"):
        return [(name, d.gpu, d.total_gpus) for name, d in (("prefill", deployment.prefill),
                                                             ("decode", deployment.decode))]
    return [("workers", deployment.gpu, deployment.total_gpus)]
