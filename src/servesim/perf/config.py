"""Perf section of the config: which step-time model prices passes, and its parameters.

```yaml
perf: {model: analytic, params: {gemm_eff_max: 0.75}, calibration: null}
perf: {model: fixed, seconds: 0.02}
perf: {model: linear, base_s: 0.005, per_prefill_token_s: 2.0e-5, per_decode_request_s: 1.0e-5}
```
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servesim.errors import ConfigError
from servesim.hardware.gpu import GPUSpec
from servesim.models.arch import ModelArch
from servesim.perf.analytic import AnalyticParams, AnalyticStepTime
from servesim.perf.plan import StepTimeModel
from servesim.perf.simple import FixedStepTime, LinearStepTime


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AnalyticPerfConfig(_Strict):
    model: Literal["analytic"] = "analytic"
    #: overrides of AnalyticParams fields.
    params: dict[str, Any] = {}
    #: YAML/JSON file of AnalyticParams overrides (applied before ``params``).
    calibration: Path | None = None


class FixedPerfConfig(_Strict):
    model: Literal["fixed"]
    seconds: float = Field(gt=0)


class LinearPerfConfig(_Strict):
    model: Literal["linear"]
    base_s: float = Field(gt=0)
    per_prefill_token_s: float = Field(0.0, ge=0)
    per_decode_request_s: float = Field(0.0, ge=0)
    per_context_token_s: float = Field(0.0, ge=0)
    per_prefill_attention_pair_s: float = Field(0.0, ge=0)


PerfConfig = Annotated[Union[AnalyticPerfConfig, FixedPerfConfig, LinearPerfConfig], Field(discriminator="model")]


class _Wrapper(_Strict):
    perf: PerfConfig = AnalyticPerfConfig()


def parse_perf_config(data: dict | None) -> AnalyticPerfConfig | FixedPerfConfig | LinearPerfConfig:
    """Validate a ``perf:`` mapping; errors name the key path (``perf.<key>``)."""
    try:
        return _Wrapper.model_validate({"perf": data if data is not None else {"model": "analytic"}}).perf
    except ValidationError as e:
        msgs = "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']} (found {err.get('input')!r})"
                         for err in e.errors())
        raise ConfigError(msgs) from None


def _analytic_params(cfg: AnalyticPerfConfig) -> AnalyticParams:
    values: dict[str, Any] = {}
    if cfg.calibration is not None:
        try:
            loaded = yaml.safe_load(Path(cfg.calibration).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"perf.calibration: cannot read {str(cfg.calibration)!r} ({e})") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"perf.calibration: {str(cfg.calibration)!r} must hold a mapping of parameters")
        values.update(loaded.get("params", loaded))
    values.update(cfg.params)
    try:
        return AnalyticParams.model_validate(values)
    except ValidationError as e:
        msgs = "; ".join(f"perf.params.{'.'.join(str(x) for x in err['loc'])}: {err['msg']} "
                         f"(found {err.get('input')!r})" for err in e.errors())
        raise ConfigError(msgs) from None


def build_step_time(
    perf_cfg: AnalyticPerfConfig | FixedPerfConfig | LinearPerfConfig | dict | None,
    arch: ModelArch,
    gpu: GPUSpec,
    tp: int = 1,
    ep: int = 1,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    attention_dp: int = 1,
) -> StepTimeModel:
    """The step-time model a perf config describes, for one worker's layout."""
    if perf_cfg is None or isinstance(perf_cfg, dict):
        perf_cfg = parse_perf_config(perf_cfg)
    if isinstance(perf_cfg, FixedPerfConfig):
        return FixedStepTime(perf_cfg.seconds)
    if isinstance(perf_cfg, LinearPerfConfig):
        return LinearStepTime(**perf_cfg.model_dump(exclude={"model"}))
    return AnalyticStepTime(arch, gpu, tp=tp, ep=ep, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                            params=_analytic_params(perf_cfg), attention_dp=attention_dp)
