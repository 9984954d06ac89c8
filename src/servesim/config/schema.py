"""The servesim config file, as pydantic models.

One YAML file with sections ``workload``, ``deployment``, ``perf``, ``output``,
``simulation``, ``seed`` and the planning sections ``slo``, ``cost`` and ``sweep``.  Every model forbids unknown keys; docs/config.md is the
reference.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from servesim.config.disaggregation import DisaggregationConfig
from servesim.engines.sglang.options import SGLangOptions
from servesim.engines.speculative import SpeculativeConfig
from servesim.engines.trtllm.options import TRTLLMOptions
from servesim.engines.vllm.options import VLLMOptions
from servesim.perf.config import AnalyticPerfConfig, PerfConfig
from servesim.plan.cost import CostConfig
from servesim.plan.slo import SLOConfig
from servesim.plan.spec import SweepSpec
from servesim.workload.config import WorkloadConfig


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


EngineOptions = Annotated[Union[SGLangOptions, VLLMOptions, TRTLLMOptions], Field(discriminator="name")]


class DeploymentConfig(_Strict):
    """What is deployed: model, GPU, engine, parallel layout and fleet size."""

    model: str = Field("meta-llama/Llama-3.1-8B-Instruct",
                       description="Hugging Face id of a bundled model, or a path to a config.json")
    gpu: str = Field("h100_sxm", description="bundled GPU name, or a path to a GPU YAML file")
    engine: EngineOptions = Field(default_factory=SGLangOptions)
    tp: int = Field(1, ge=1, description="tensor-parallel GPUs per worker")
    ep: int = Field(1, ge=1, description="expert-parallel GPUs per worker (MoE models); must divide tp × attention_dp")
    attention_dp: int = Field(
        1, ge=1, description="attention data-parallel ranks per worker (each tp GPUs); the worker has tp × attention_dp GPUs")
    workers: int = Field(1, ge=1, description="identical workers, requests placed by `router`")
    router: Literal["round_robin", "random", "least_loaded", "power_of_two", "kv_aware", "session_affinity"] = "round_robin"
    router_options: dict[str, Any] = Field(default_factory=dict, description="options of `router`, see docs/routing.md")
    kv_event_delay_s: float = Field(0.0, ge=0, description="seconds before a worker's KV events reach the router (kv_aware)")
    weight_dtype: Literal["bf16", "fp8", "fp4", "int4"] | None = Field(
        None, description="weight precision; None: bf16 unless the model name says FP8/NVFP4")
    kv_dtype: Literal["bf16", "fp8"] | None = Field(None, description="KV-cache precision; None: bf16")
    disaggregation: DisaggregationConfig | None = Field(
        None, description="separate prefill and decode pools joined by a KV link (docs/disaggregation.md)")
    speculative: SpeculativeConfig | None = Field(
        None, description="speculative decoding: drafts and acceptance (docs/speculative.md)")

    @field_validator("engine", mode="before")
    @classmethod
    def _engine_shorthand(cls, v: Any) -> Any:
        """Accept ``engine: sglang`` as well as ``engine: {name: sglang, ...}``; options without a
        ``name`` are the default engine's (SGLang), so ``--set deployment.engine.schedule_policy=lpm``
        works on a config that never named its engine."""
        if isinstance(v, str):
            return {"name": v}
        if isinstance(v, dict) and "name" not in v:
            return {"name": "sglang", **v}
        return v


class OutputConfig(_Strict):
    dir: str | None = Field("servesim-out", description="output folder; null writes no files")
    requests: bool = Field(True, description="write requests.parquet")
    timeseries: bool = Field(True, description="write timeseries.parquet")
    timeseries_interval_s: float = Field(1.0, gt=0, description="minimum seconds between samples per worker")
    kv_events: bool = Field(False, description="write kv_events.jsonl: every block stored in / removed from a cache")


class SimulationConfig(_Strict):
    mode: Literal["fast", "step"] = Field(
        "fast", description="fast: decode-only stretches advance in one step; step: pass by pass")
    max_sim_time_s: float | None = Field(None, gt=0, description="stop the virtual clock here; the rest is unfinished")


class Config(_Strict):
    seed: int = Field(0, ge=0)
    workload: WorkloadConfig
    deployment: DeploymentConfig = Field(default_factory=DeploymentConfig)
    perf: PerfConfig = Field(default_factory=AnalyticPerfConfig)
    client: str = Field("none", description="client profile: what the benchmark client and API server add to "
                                            "the engine's token times (servesim.perf.clients; none = the engine "
                                            "alone; docs/config.md lists the profiles)")
    output: OutputConfig = Field(default_factory=OutputConfig)
    simulation: SimulationConfig = Field(default_factory=SimulationConfig)
    slo: SLOConfig | None = Field(None, description="latency objectives: attainment and goodput (docs/planning.md)")
    cost: CostConfig = Field(default_factory=CostConfig, description="GPU prices and power (docs/planning.md)")
    sweep: SweepSpec | None = Field(None, description="what `servesim sweep` varies (docs/planning.md)")
    #: Folder that relative paths (traces) are resolved against: the config file's.
    _base_dir: Path | None = PrivateAttr(None)

    @field_validator("perf", mode="before")
    @classmethod
    def _perf_model_default(cls, v: Any) -> Any:
        """``perf: {calibration: null}`` means the analytic model (the default)."""
        if isinstance(v, dict) and "model" not in v:
            return {"model": "analytic", **v}
        return v
