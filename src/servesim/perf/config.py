"""Perf section of the config: which step-time model prices passes, and its parameters.

```yaml
perf: {model: analytic, params: {gemm_eff_max: 0.75}, calibration: default, frontend: {}}
perf: {model: fixed, seconds: 0.02}
perf: {model: linear, base_s: 0.005, per_prefill_token_s: 2.0e-5, per_decode_request_s: 1.0e-5}
perf: {model: aic, aic: {backend_version: current}}   # measured tables, servesim[aic]
```

``calibration`` (analytic only) names a calibration file (:mod:`servesim.perf.calibration`):
``default`` is the one shipped with servesim, a path is a file of the same format (or a flat
mapping of AnalyticParams overrides), ``null`` is none.  The file's values for the
deployment's ``<gpu>/<engine>`` group (falling back to its shared values) are applied first,
then the config's ``client`` profile sets the client-side frontend fields
(:mod:`servesim.perf.clients`; ``none``, the default, is the engine alone), then ``params``
(analytic) and ``frontend`` (:class:`~servesim.perf.frontend.FrontendParams` overrides) on top.
Without a calibration (``null``, or the fixed and linear models) the engine's scheduler CPU
time starts from zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from servesim.errors import ConfigError
from servesim.hardware.gpu import GPUSpec
from servesim.input_paths import input_path
from servesim.models.arch import ModelArch
from servesim.perf.analytic import AnalyticStepTime
from servesim.perf.analytic_params import AnalyticParams
from servesim.perf.engine_kernels import kernel_rates
from servesim.perf.frontend import FrontendParams
from servesim.perf.plan import StepTimeModel
from servesim.perf.simple import FixedStepTime, LinearStepTime


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AnalyticPerfConfig(_Strict):
    model: Literal["analytic"] = "analytic"
    #: overrides of AnalyticParams fields.
    params: dict[str, Any] = {}
    #: calibration: a bundled name ("default": all rows; "fit-split": fit rows only), a path,
    #: or null (none); applied before ``params``.
    calibration: str | None = "default"
    #: overrides of FrontendParams fields (API server, tokenizer, stream, scheduler CPU).
    frontend: dict[str, Any] = {}


class FixedPerfConfig(_Strict):
    model: Literal["fixed"]
    seconds: float = Field(gt=0)
    frontend: dict[str, Any] = {}


class LinearPerfConfig(_Strict):
    model: Literal["linear"]
    base_s: float = Field(gt=0)
    per_prefill_token_s: float = Field(0.0, ge=0)
    per_decode_request_s: float = Field(0.0, ge=0)
    per_context_token_s: float = Field(0.0, ge=0)
    per_prefill_attention_pair_s: float = Field(0.0, ge=0)
    frontend: dict[str, Any] = {}


class AicTablesConfig(_Strict):
    """``perf.aic``: which measured tables (:mod:`servesim.perf.aic`); quant modes default from precision."""

    backend_version: str = "current"
    gemm_quant_mode: str | None = None
    moe_quant_mode: str | None = None
    kv_quant_mode: str | None = None
    fmha_quant_mode: str | None = None


class AicPerfConfig(_Strict):
    """Measured operator tables of aiconfigurator-core (``pip install 'servesim[aic]'``)."""

    model: Literal["aic"]
    aic: AicTablesConfig = AicTablesConfig()
    frontend: dict[str, Any] = {}


PerfConfig = Annotated[Union[AnalyticPerfConfig, FixedPerfConfig, LinearPerfConfig, AicPerfConfig],
                       Field(discriminator="model")]


class _Wrapper(_Strict):
    perf: PerfConfig = AnalyticPerfConfig()


def parse_perf_config(data: dict | None) -> AnalyticPerfConfig | FixedPerfConfig | LinearPerfConfig:
    """Validate a ``perf:`` mapping; errors name the key path (``perf.<key>``)."""
    try:
        if data is None:
            data = {}
        if isinstance(data, dict) and "model" not in data:
            data = {"model": "analytic", **data}
        return _Wrapper.model_validate({"perf": data}).perf
    except ValidationError as e:
        # drop the union's tag from the path: perf.<model>.<key> → perf.<key>
        tag = data.get("model") if isinstance(data, dict) else None
        locs = [err["loc"][:1] + err["loc"][2:] if len(err["loc"]) > 2 and err["loc"][1] == tag
                else err["loc"] for err in e.errors()]
        msgs = "; ".join(f"{'.'.join(str(x) for x in loc)}: {err['msg']} (found {err.get('input')!r})"
                         for loc, err in zip(locs, e.errors()))
        raise ConfigError(msgs) from None


@dataclass
class ResolvedPerf:
    """The parameters a perf config resolves to for one deployment (shown in prediction.json)."""

    calibration: str | None  # file used, or None
    group: str  # the calibration group that applied: "<gpu>/<engine>[/<model>[@<precision>]]" or "shared"
    analytic: dict[str, Any]  # AnalyticParams overrides (calibration, then perf.params)
    frontend: FrontendParams
    #: the client profile (servesim.perf.clients) that set the frontend's client-side fields
    client: str = "none"
    client_origin: str = "source"  # "fitted" (on that client's rows) or "source" (derived)
    client_description: str = ""
    #: the calibration's cross-validated error band for this deployment (Calibration.error_band)
    error_band: dict[str, Any] | None = None

    def describe(self) -> dict[str, Any]:
        return {"calibration": self.calibration, "calibration_group": self.group,
                "client": self.client, "client_origin": self.client_origin,
                "client_description": self.client_description,
                "analytic_overrides": dict(self.analytic), "frontend": self.frontend.model_dump()}


def _load_calibration(name: str | None, base_dir: Path | None):
    from servesim.perf.calibration import DEFAULT_CALIBRATION, bundled_calibration, load_calibration

    if name is None:
        return None, None
    if name == "default":
        return load_calibration(None), str(DEFAULT_CALIBRATION.name)
    path = Path(input_path(name, base_dir))  # beside the config file first (docs/config.md "Paths")
    bundled = None if path.exists() else bundled_calibration(name)
    if bundled is not None:
        return load_calibration(bundled), bundled.name
    try:
        return load_calibration(path), str(path)
    except ConfigError as e:
        raise ConfigError(f"perf.calibration: {e}") from None


def resolve_perf(perf_cfg: AnalyticPerfConfig | FixedPerfConfig | LinearPerfConfig | dict | None,
                 gpu: str = "", engine: str = "", base_dir: Path | None = None,
                 model: str | None = None, precision: str | None = None, client: str | None = None) -> ResolvedPerf:
    """Calibration values for the deployment's most specific group, the client profile, then the
    config's own overrides.

    ``model`` and ``precision`` (weights) select model groups of the calibration file
    (:mod:`servesim.perf.calibration`); without them only ``<gpu>/<engine>`` groups apply.  The
    calibration sets the engine's frontend fields (scheduler CPU time) only; ``client`` (a
    profile name, :mod:`servesim.perf.clients`; None: ``none``, the engine alone) sets the
    client-side ones, from the calibration file's fitted ``clients:`` section where it has that
    profile, else from the built-in profile.  ``perf.frontend`` overrides both.
    """
    from servesim.perf.clients import resolve_client

    if perf_cfg is None or isinstance(perf_cfg, dict):
        perf_cfg = parse_perf_config(perf_cfg)
    analytic: dict[str, Any] = {}
    cal_name = perf_cfg.calibration if isinstance(perf_cfg, AnalyticPerfConfig) else None
    cal, used = _load_calibration(cal_name, base_dir)
    group = f"{gpu}/{engine}"
    front: dict[str, Any] = FrontendParams.zero().model_dump()
    band = None
    if cal is not None:
        a, fe = cal.resolve(gpu, engine, model, precision)
        group = cal.group_of(gpu, engine, model, precision)
        band = cal.error_band(gpu, engine, model, precision)
        analytic.update(a)
        front.update(fe)
    profile = resolve_client(client, cal.clients if cal is not None else None)
    front.update(profile.frontend())
    if isinstance(perf_cfg, AnalyticPerfConfig):
        analytic.update(perf_cfg.params)
    front.update(perf_cfg.frontend)
    try:
        fparams = FrontendParams.model_validate(front)
    except ValidationError as e:
        msgs = "; ".join(f"perf.frontend.{'.'.join(str(x) for x in err['loc'])}: {err['msg']} "
                         f"(found {err.get('input')!r})" for err in e.errors())
        raise ConfigError(msgs) from None
    return ResolvedPerf(calibration=used, group=group, analytic=analytic, frontend=fparams, client=profile.name,
                        client_origin=profile.origin, client_description=profile.description, error_band=band)


def _analytic_params(values: dict[str, Any]) -> AnalyticParams:
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
    engine: str = "",
    resolved: ResolvedPerf | None = None,
    eager_launch: bool = False,
    moe_all_to_all: bool = False,
    moe_kernel: str | None = None,
    graph_pass_overhead_s: float | None = None,
) -> StepTimeModel:
    """The step-time model a perf config describes, for one worker's layout (GPU work only).

    ``resolved`` (from :func:`resolve_perf`) carries the calibrated analytic overrides; when
    absent they are resolved here for ``gpu.name``/``engine``.  ``eager_launch``: the engine
    runs passes outside CUDA graphs in PyTorch eager mode (its plan says so).  The frontend's
    scheduler CPU time is added by :meth:`servesim.perf.frontend.Frontend.wrap_step_time`, not here.
    ``moe_all_to_all``: the engine's expert parallelism dispatches routed tokens by all-to-all
    (its plan says so; else each expert-parallel rank's fused MoE runs over the whole batch).
    ``moe_kernel``: the fused-MoE kernel path the engine runs (its plan's; None: the format's own).
    ``graph_pass_overhead_s``: the engine's own time of a CUDA-graph decode pass beyond its layers
    (its plan's; None: ``AnalyticParams``' default), unless the calibration or ``perf.params`` set it.
    """
    if perf_cfg is None or isinstance(perf_cfg, dict):
        perf_cfg = parse_perf_config(perf_cfg)
    if isinstance(perf_cfg, FixedPerfConfig):
        return FixedStepTime(perf_cfg.seconds)
    if isinstance(perf_cfg, LinearPerfConfig):
        return LinearStepTime(**perf_cfg.model_dump(exclude={"model", "frontend"}))
    if isinstance(perf_cfg, AicPerfConfig):
        from servesim.perf.aic import AicOptions, AicStepTime  # optional extra: import on use

        return AicStepTime(arch, gpu, tp=tp, ep=ep, weight_dtype=weight_dtype, kv_dtype=kv_dtype, engine=engine,
                           attention_dp=attention_dp, options=AicOptions(**perf_cfg.aic.model_dump()))
    if resolved is None:
        resolved = resolve_perf(perf_cfg, gpu.name, engine)
    values = dict(resolved.analytic)
    if graph_pass_overhead_s is not None:
        values.setdefault("graph_pass_overhead_s", graph_pass_overhead_s)
    return AnalyticStepTime(arch, gpu, tp=tp, ep=ep, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                            params=_analytic_params(values), attention_dp=attention_dp,
                            eager_launch=eager_launch, moe_all_to_all=moe_all_to_all, moe_kernel=moe_kernel,
                            kernel_rates=kernel_rates(engine, gpu))
