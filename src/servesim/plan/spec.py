"""The ``sweep:`` section: which config keys vary, how candidates are searched, where they run.

A parameter is a dotted config key with either a list of values (any YAML value: a number,
a name, a whole mapping such as a ``deployment.disaggregation`` pool split) or a numeric
range ``{low, high, step}`` / ``{low, high, log: true}``.  Grid search needs every parameter
to be finite (a list, or a range with ``step``); random and model-based search sample ranges
directly.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Candidate metrics a sweep can optimise (columns of candidates.parquet).
METRICS = ("throughput_per_gpu_tok_s", "per_user_tok_s", "goodput_rps", "goodput_tok_s", "slo_attainment",
           "cost_per_hour_usd", "cost_per_mtok_usd", "ttft_p90_ms", "tpot_p90_ms", "gpus",
           "energy_j_per_tok", "request_per_s", "output_tok_s")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RangeParam(_Strict):
    """A numeric range: ``step`` makes it a finite grid; ``log`` samples it log-uniformly."""

    low: float
    high: float
    step: float | None = Field(None, gt=0)
    log: bool = False
    integer: bool = Field(False, description="whole numbers only")

    @model_validator(mode="after")
    def _ordered(self) -> "RangeParam":
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        if self.log and self.low <= 0:
            raise ValueError("log ranges need low > 0")
        return self

    def grid(self) -> list[Any] | None:
        if self.step is None:
            return None
        n = int(math.floor((self.high - self.low) / self.step + 1e-9)) + 1
        vals = [self.low + i * self.step for i in range(n)]
        return [int(round(v)) for v in vals] if self.integer else [round(v, 12) for v in vals]


class ValuesParam(_Strict):
    values: list[Any] = Field(min_length=1)


ParamSpec = Union[list[Any], ValuesParam, RangeParam]


class ExecutorConfig(_Strict):
    """Where candidates run: a local process pool, or Ray tasks (local Ray without ``address``)."""

    kind: Literal["local", "ray"] = "local"
    jobs: int | None = Field(None, ge=1, description="parallel candidates; None: CPU count (local) / cluster CPUs (ray)")
    address: str | None = Field(None, description="Ray cluster address (ray.init(address=...)); None: start local Ray")


class SweepSpec(_Strict):
    """``sweep:``: see docs/planning.md."""

    parameters: dict[str, ParamSpec] = Field(min_length=1, description="dotted config key -> values or range")
    search: Literal["grid", "random", "tpe", "nsga2"] = "grid"
    trials: int | None = Field(None, ge=1, description="candidates to try (random, tpe, nsga2); grid: all")
    seed: int = Field(0, ge=0, description="seed of the search (sampling); each run keeps the config's seed")
    objectives: list[str] | None = Field(
        None, description="METRIC:min|max; tpe takes the first, nsga2 all; "
                          "default: gpus:min (tpe), throughput_per_gpu_tok_s:max + per_user_tok_s:max (nsga2)")
    require_slo: bool = Field(True, description="only candidates meeting the SLO's target count as solutions")
    gpu_budget: int | None = Field(None, ge=1, description="candidates with more GPUs are infeasible")
    fill_budget: bool = Field(False, description="give each (aggregated) candidate as many workers as gpu_budget "
                                                 "holds: compares layouts at a fixed GPU count")
    choose: Literal["cost", "gpus"] = Field("cost", description="the chosen deployment: cheapest per hour, or fewest GPUs")
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    out: str | None = Field("servesim-sweep", description="output folder (candidates.parquet, sweep.json)")

    @field_validator("parameters")
    @classmethod
    def _keys(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key in v:
            if not key or any(not p for p in key.split(".")):
                raise ValueError(f"{key!r}: expected a dotted config key such as deployment.workers")
            if key.split(".")[0] == "sweep":
                raise ValueError(f"{key!r}: a sweep cannot vary its own section")
        return v

    @field_validator("objectives")
    @classmethod
    def _objectives(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        for o in v:
            name, _, direction = o.partition(":")
            if name not in METRICS or direction not in ("min", "max"):
                raise ValueError(f"{o!r}: expected METRIC:min or METRIC:max with METRIC one of {', '.join(METRICS)}")
        return v

    @model_validator(mode="after")
    def _searchable(self) -> "SweepSpec":
        if self.fill_budget and (self.gpu_budget is None or "deployment.workers" in self.parameters):
            raise ValueError("fill_budget sets deployment.workers from gpu_budget: give gpu_budget and "
                             "do not sweep deployment.workers")
        if self.search == "grid":
            for key, p in self.parameters.items():
                if isinstance(p, RangeParam) and p.step is None:
                    raise ValueError(f"parameters.{key}: grid search needs a list of values or a range with step")
        return self

    def objective_list(self) -> list[tuple[str, str]]:
        """[(metric, "min"|"max")] with the search's default."""
        if self.objectives:
            return [tuple(o.split(":")) for o in self.objectives]  # type: ignore[misc]
        if self.search == "nsga2":
            return [("throughput_per_gpu_tok_s", "max"), ("per_user_tok_s", "max")]
        return [("gpus", "min")]

    def choices(self, key: str) -> list[Any] | None:
        """The finite values of a parameter (None: a continuous range)."""
        p = self.parameters[key]
        if isinstance(p, list):
            return p
        if isinstance(p, ValuesParam):
            return p.values
        return p.grid()
