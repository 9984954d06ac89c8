"""``deployment.disaggregation``: the prefill and decode pools and the KV link between them.

The behaviour is in ``cluster/disagg.py`` (docs/disaggregation.md); this is the schema only,
so that ``config/`` does not import the cluster.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from servesim.engines.sglang.options import SGLangOptions
from servesim.engines.trtllm.options import TRTLLMOptions
from servesim.engines.vllm.options import VLLMOptions

_PoolEngine = Annotated[Union[SGLangOptions, VLLMOptions, TRTLLMOptions], Field(discriminator="name")]


class PoolConfig(BaseModel):
    """One pool of a disaggregated deployment; unset fields take ``deployment``'s value."""

    model_config = ConfigDict(extra="forbid")

    workers: int = Field(1, ge=1, description="workers in this pool")
    tp: int | None = Field(None, ge=1, description="tensor-parallel GPUs per worker (None: deployment.tp)")
    ep: int | None = Field(None, ge=1, description="expert-parallel GPUs per worker (None: deployment.ep)")
    attention_dp: int | None = Field(None, ge=1, description="attention-DP ranks per worker (None: deployment.attention_dp)")
    gpu: str | None = Field(None, description="GPU of this pool (None: deployment.gpu)")
    engine: _PoolEngine | None = Field(None, description="engine options of this pool (None: deployment.engine)")

    @field_validator("engine", mode="before")
    @classmethod
    def _engine_shorthand(cls, v: Any) -> Any:
        return {"name": v} if isinstance(v, str) else v


class DisaggregationConfig(BaseModel):
    """``deployment.disaggregation``: the two pools and the KV link between them."""

    model_config = ConfigDict(extra="forbid")

    prefill: PoolConfig = Field(default_factory=PoolConfig)
    decode: PoolConfig = Field(default_factory=PoolConfig)
    link_gbs: float = Field(50.0, gt=0, description="GB/s from one prefill worker to one decode worker "
                                                    "(e.g. 400 Gb/s RDMA = 50 GB/s)")
    link_latency_us: float = Field(20.0, ge=0, description="fixed latency per transfer, microseconds")
    decode_router: Literal["least_loaded", "round_robin", "kv_aware"] = Field(
        "least_loaded", description="how a prefilled request picks its decode worker")
