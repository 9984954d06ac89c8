"""GPU energy of a run from a per-GPU power model, and joules per token.

The model (docs/planning.md states its limits).  A GPU draws ``idle_w`` all the time; during
a pass it draws on top of that a share of its dynamic range ``max_w - idle_w``::

    P_pass = idle_w + (max_w - idle_w) * (m + (1 - m) * u)

where ``u`` is the pass's compute utilisation (the arithmetic it did over what the GPU's
dense peak could do in the pass's time, at most 1) and ``m`` the share a purely memory-bound
pass draws (``memory_bound_share``): a decode pass streaming weights at full bandwidth does
little arithmetic yet is far from idle, a large prefill pass runs near TDP.  The arithmetic of
a pass is ``2 x active parameters (embedding excluded) x tokens``, shared evenly by the
worker's GPUs.  Because the power is linear in ``u``, summing it over passes needs only each
worker's busy time and tokens::

    E_gpu = idle_w * T + (max_w - idle_w) * (m * busy + (1 - m) * min(FLOPs / peak, busy))

with ``T`` the run's virtual duration, ``busy`` the worker's time in passes and ``peak`` the
dense peak of the weights' precision.  A facility overhead multiplies it by ``pue``.
"""

from __future__ import annotations

import functools
from typing import Any

import yaml

from servesim.plan.cost import DATA, CostConfig
from servesim.plan.fleet import Pool


@functools.lru_cache(maxsize=1)
def bundled_power() -> dict[str, Any]:
    return yaml.safe_load((DATA / "gpu_power.yaml").read_text())


def gpu_power(gpu_name: str, cfg: CostConfig | None) -> tuple[float, float] | None:
    """(idle_w, max_w) of a GPU, the config's override first; None when unknown."""
    base = bundled_power()["power"].get(gpu_name, {})
    over = cfg.power.get(gpu_name) if cfg is not None else None
    idle = over.idle_w if over is not None and over.idle_w is not None else base.get("idle_w")
    peak = over.max_w if over is not None and over.max_w is not None else base.get("max_w")
    if idle is None or peak is None:
        return None
    return float(idle), float(max(peak, idle))


def flops_per_token(arch) -> float:
    """Multiply-adds x 2 of one token through the weights (active experts; no embedding lookup)."""
    pc = arch.param_count()
    return 2.0 * (pc.active - pc.by_category.get("embed", 0))


def pool_energy_j(pool: Pool, duration_s: float, cfg: CostConfig | None) -> float | None:
    """Joules of the pool's GPUs over ``duration_s`` (None if the GPU's power is unknown)."""
    power = gpu_power(pool.gpu.name, cfg)
    if power is None:
        return None
    idle, peak_w = power
    m = cfg.memory_bound_share if cfg is not None and cfg.memory_bound_share is not None else \
        float(bundled_power()["memory_bound_share"])
    peak_flops = pool.gpu.peak_flops(pool.weight_dtype)
    fpt = flops_per_token(pool.arch)
    total = 0.0
    for w in pool.workers:
        busy = float(w.busy_time)
        compute_s = min(fpt * float(w.tokens) / pool.gpus_per_worker / peak_flops, busy)
        per_gpu = idle * duration_s + (peak_w - idle) * (m * busy + (1.0 - m) * compute_s)
        total += per_gpu * pool.gpus_per_worker
    return total


def energy_summary(pools: list[Pool], cfg: CostConfig | None, duration_s: float,
                   input_tokens: int, output_tokens: int) -> dict[str, Any]:
    """The ``energy`` block of the summary: joules, mean power, J per token.

    ``duration_s`` is the run's virtual duration (every GPU is powered for all of it); the
    tokens are those of completed requests.
    """
    pue = cfg.pue if cfg is not None else 1.0
    per_pool = {}
    total: float | None = 0.0
    for pool in pools:
        e = pool_energy_j(pool, duration_s, cfg)
        per_pool[pool.name] = {"gpu": pool.gpu.name, "gpus": pool.gpus,
                               "joules": e * pue if e is not None else None}
        total = total + e * pue if total is not None and e is not None else None
    tokens = input_tokens + output_tokens
    return {
        "joules": total,
        "mean_power_w": total / duration_s if total is not None and duration_s > 0 else None,
        "j_per_token": total / tokens if total is not None and tokens else None,
        "j_per_output_token": total / output_tokens if total is not None and output_tokens else None,
        "pue": pue,
        "pools": per_pool,
    }
