"""What a fleet costs: $ per hour and $ per million tokens from per-GPU-hour prices.

Prices: ``data/gpu_prices.yaml`` (each figure with its source and date), overridden by
``cost.gpu_hour_usd`` (one price for every GPU, or a mapping GPU name -> price).  A run's cost
is the fleet's hourly price times the measured duration: the GPUs are rented for the whole
run, busy or not.  $ per million tokens divides that cost by the tokens of completed requests:
``usd_per_mtok_input`` and ``usd_per_mtok_output`` charge the whole cost to one kind of token
(the convention of benchmark reports, since a shared GPU pass cannot be split between them),
``usd_per_mtok`` to both together; in a disaggregated deployment the split is physical as well:
``prefill_usd_per_mtok_input`` is the prefill pool's cost per input token and
``decode_usd_per_mtok_output`` the decode pool's per output token.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

DATA = Path(__file__).parent / "data"


class PowerOverride(BaseModel):
    model_config = ConfigDict(extra="forbid")

    idle_w: float | None = Field(None, ge=0, description="board power with nothing running, W")
    max_w: float | None = Field(None, gt=0, description="board power of a compute-bound pass, W")


class CostConfig(BaseModel):
    """``cost:``: GPU prices and power, for $/hour, $/Mtoken and J/token (docs/planning.md)."""

    model_config = ConfigDict(extra="forbid")

    gpu_hour_usd: float | dict[str, float] | None = Field(
        None, description="USD per GPU-hour: one price, or per GPU name; None: the bundled defaults")
    power: dict[str, PowerOverride] = Field(default_factory=dict, description="per GPU name: idle_w / max_w")
    memory_bound_share: float | None = Field(
        None, ge=0, le=1, description="share of dynamic power a memory-bound pass draws; None: bundled")
    pue: float = Field(1.0, ge=1.0, description="facility power usage effectiveness multiplying GPU energy")


@functools.lru_cache(maxsize=1)
def bundled_prices() -> dict[str, dict]:
    return yaml.safe_load((DATA / "gpu_prices.yaml").read_text())["prices"]


def gpu_price(gpu_name: str, cfg: CostConfig | None) -> tuple[float | None, str]:
    """(USD per GPU-hour or None when unknown, where the figure comes from)."""
    given = cfg.gpu_hour_usd if cfg is not None else None
    if isinstance(given, (int, float)):
        return float(given), "cost.gpu_hour_usd"
    if isinstance(given, dict) and gpu_name in given:
        return float(given[gpu_name]), f"cost.gpu_hour_usd.{gpu_name}"
    entry = bundled_prices().get(gpu_name)
    if entry is None:
        return None, "no bundled price: set cost.gpu_hour_usd"
    return float(entry["usd_per_gpu_hour"]), f"bundled ({entry['source']}, {entry['as_of']})"


def fleet_price(pools: list[tuple[str, Any, int]], cfg: CostConfig | None) -> dict[str, Any]:
    """$ per hour of each pool ((name, GPUSpec, GPUs)) and of the fleet (None if any is unknown)."""
    out = {"pools": {}, "usd_per_hour": 0.0}
    for name, gpu, n in pools:
        price, source = gpu_price(gpu.name, cfg)
        out["pools"][name] = {"gpu": gpu.name, "gpus": n, "usd_per_gpu_hour": price, "price_source": source,
                              "usd_per_hour": price * n if price is not None else None}
        if price is None:
            out["usd_per_hour"] = None
        elif out["usd_per_hour"] is not None:
            out["usd_per_hour"] += price * n
    return out


def _per_mtok(usd: float | None, tokens: int) -> float | None:
    return usd / tokens * 1e6 if usd is not None and tokens > 0 else None


def cost_summary(pools: list[tuple[str, Any, int]], cfg: CostConfig | None, duration_s: float,
                 input_tokens: int, output_tokens: int) -> dict[str, Any]:
    """The ``cost`` block of the summary (see the module docstring for the definitions)."""
    price = fleet_price(pools, cfg)
    hours = duration_s / 3600.0
    run_usd = price["usd_per_hour"] * hours if price["usd_per_hour"] is not None else None
    out = {
        "usd_per_hour": price["usd_per_hour"],
        "run_usd": run_usd,
        "usd_per_mtok": _per_mtok(run_usd, input_tokens + output_tokens),
        "usd_per_mtok_input": _per_mtok(run_usd, input_tokens),
        "usd_per_mtok_output": _per_mtok(run_usd, output_tokens),
        "pools": price["pools"],
    }
    if set(price["pools"]) == {"prefill", "decode"}:
        p, d = price["pools"]["prefill"]["usd_per_hour"], price["pools"]["decode"]["usd_per_hour"]
        out["prefill_usd_per_mtok_input"] = _per_mtok(p * hours if p is not None else None, input_tokens)
        out["decode_usd_per_mtok_output"] = _per_mtok(d * hours if d is not None else None, output_tokens)
    return out
