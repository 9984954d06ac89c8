"""Calibration files: fitted analytic-model and frontend parameters, shared and per group.

Format (YAML)::

    version: 1
    fitted_on: calibration.csv (N points)        # free-form provenance
    shared:                                      # applies to every deployment
      analytic: {gemm_eff_max: 0.7, ...}         # AnalyticParams overrides
      frontend: {first_token_overhead_s: 0.03, ...}   # FrontendParams overrides
    groups:                                      # "<gpu>/<engine>" → overrides of shared
      h200_sxm/sglang: {analytic: {...}, frontend: {...}}

A group key may also be ``<gpu>/*`` or ``*/<engine>``, or name a model within a gpu and
engine: ``<gpu>/<engine>/<model id>`` and ``<gpu>/<engine>/<model id>@<weight precision>``
(e.g. ``b200_sxm/trtllm/deepseek-ai/DeepSeek-R1@fp4``; 4-bit formats are all written ``fp4``).
Every matching group applies, the more specific on top: ``shared`` < ``*/engine`` <
``gpu/*`` < ``gpu/engine`` < ``gpu/engine/model`` < ``gpu/engine/model@precision``.  Model
groups capture what an op-level model misses for one model on one stack (its kernels' real
efficiency, its server's fixed latency); a model without a group falls back to its GPU/engine.
A model group is found under the model's own id and under its architecture's id
(the bundled config :func:`servesim.models.arch.resolve_name` gives: ``deepseek-ai/DeepSeek-R1-0528`` and
``nvidia/DeepSeek-R1-NVFP4`` share ``deepseek-ai/DeepSeek-V3``'s shapes), the architecture's
first and the exact name on top: a checkpoint that calibration saw too few points of takes its
architecture's values rather than only its GPU/engine's.  (Fitted files key model groups by
the measured name: pooling the DeepSeek checkpoints' rows into one group per architecture was
tried and made the held-out TPOT worse, 11.5% → 12.7%; their runs come from different campaigns.)

:func:`resolve` gives the ``(analytic, frontend)`` override dicts for one deployment.
The package ships a default fitted on ``shared/data/measured/calibration.csv``:
:data:`DEFAULT_CALIBRATION`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from servesim import yaml_io
from servesim.errors import ConfigError
from servesim.models.arch import resolve_name

#: Points a GPU/engine group needs to get values of its own when a calibration is fitted
#: (``servesim calibrate --min-group-points``): the shipped files were fitted with it, and
#: benchmarks/calibration_cv.py scores the same procedure.
MIN_GROUP_POINTS = 8

DEFAULT_CALIBRATION = Path(__file__).parent / "calibrations" / "default.yaml"


#: GPU lineage for calibration inheritance: vendor, generation (ordered within the vendor),
#: compute capability (NVIDIA) or gfx target (AMD) as a number, memory technology.  A GPU without
#: groups of its own takes those of the nearest GPU of its vendor that has some
#: (:func:`gpu_distance`); never another vendor's.
GPU_LINEAGE: dict[str, tuple[str, int, float, str]] = {
    "a100_80gb": ("nvidia", 0, 8.0, "hbm2e"),
    "l40s": ("nvidia", 1, 8.9, "gddr6"),
    "h100_sxm": ("nvidia", 2, 9.0, "hbm3"),
    "h200_sxm": ("nvidia", 2, 9.0, "hbm3e"),
    "b200_sxm": ("nvidia", 3, 10.0, "hbm3e"),
    "gb200": ("nvidia", 3, 10.0, "hbm3e"),
    "b300_sxm": ("nvidia", 3, 10.3, "hbm3e"),
    "gb300": ("nvidia", 3, 10.3, "hbm3e"),
    "mi300x": ("amd", 3, 9.42, "hbm3"),
    "mi325x": ("amd", 3, 9.42, "hbm3e"),
    "mi355x": ("amd", 4, 9.50, "hbm3e"),
}


def gpu_vendor(gpu: str) -> str | None:
    lin = GPU_LINEAGE.get(gpu)
    return lin[0] if lin else None


def gpu_distance(a: str, b: str) -> float:
    """How far GPU ``b``'s calibration is from applying to ``a``: generations apart weigh most,
    then compute capability, then memory technology; another vendor (or an unknown GPU) is
    infinitely far."""
    la, lb = GPU_LINEAGE.get(a), GPU_LINEAGE.get(b)
    if a == b:
        return 0.0
    if la is None or lb is None or la[0] != lb[0]:
        return float("inf")
    return 10.0 * abs(la[1] - lb[1]) + abs(la[2] - lb[2]) + (0.5 if la[3] != lb[3] else 0.0)


@dataclass
class Calibration:
    shared: dict[str, dict[str, Any]] = field(default_factory=lambda: {"analytic": {}, "frontend": {}})
    groups: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    #: Client profiles fitted on the rows of each client (:mod:`servesim.perf.clients`):
    #: ``{name: {"frontend": {...}, "description": ..., "points": n}}``.
    clients: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Expected error bands from cross-validated residuals (:mod:`servesim.perf.intervals`).
    intervals: dict[str, Any] = field(default_factory=dict)

    def gpu_source(self, gpu: str, engine: str) -> str:
        """The GPU whose groups a deployment of ``engine`` on ``gpu`` uses: ``gpu`` itself when
        the file has groups of that engine on it, else the nearest GPU of the same vendor that
        has (:func:`gpu_distance`); ``gpu`` itself when none does (then only the shared values
        apply, which a fitted file keeps at the physical priors, not at another vendor's fit)."""
        with_engine = self._gpus_with_groups(engine)
        if gpu in with_engine:
            return gpu
        near = sorted((gpu_distance(gpu, g), g) for g in with_engine if g != "*")
        return near[0][1] if near and math.isfinite(near[0][0]) else gpu

    def _gpus_with_groups(self, engine: str) -> set[str]:
        """The GPUs (``*`` included) the file has groups of ``engine`` on."""
        return {k.split("/", 1)[0] for k in self.groups if k.split("/")[1] in (engine, "*")}

    def _has_model_group(self, gpu: str, engine: str, model: str | None, precision: str | None) -> bool:
        """Whether ``model`` (any of its names, with or without ``precision``) has a group on ``gpu``."""
        return any(k in self.groups for k in group_keys(gpu, engine, model, precision)[3:])

    def resolve(self, gpu: str, engine: str, model: str | None = None,
                precision: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """(AnalyticParams overrides, FrontendParams overrides of the engine) for one deployment.

        Client-side frontend fields are never taken from the file's shared or group sections
        (a client profile sets them: :func:`servesim.perf.clients.resolve_client`).  A GPU
        without groups of its own takes its nearest same-vendor GPU's (:meth:`gpu_source`).

        The engine's scheduler CPU time (the engine-side frontend fields) applies only to a
        deployment the file measured — its model's group on its own GPU — or to any deployment
        when the file has no groups (hand-written shared values): what that CPU time costs
        depends on the model served (per-pass graph breaks, sampling over the vocabulary, the
        tokenizer) and on the node's host CPU, so another model's or another GPU's fit does not
        carry over, and an unmeasured deployment keeps the engine model's own exposure of it.
        Held out for real, carrying it over scored TPOT 14.9% / 15.2% (a family / a GPU held
        out) where leaving it out scores 14.8% / 15.0% (docs/validation.md)."""
        from servesim.perf.clients import CLIENT_FIELDS

        analytic = dict(self.shared.get("analytic", {}))
        frontend = dict(self.shared.get("frontend", {}))
        for key in group_keys(self.gpu_source(gpu, engine), engine, model, precision):
            g = self.groups.get(key)
            if g:
                analytic.update(g.get("analytic", {}))
                frontend.update(g.get("frontend", {}))
        if not self.measured(gpu, engine, model, precision):
            return analytic, {}
        return analytic, {k: v for k, v in frontend.items() if k not in CLIENT_FIELDS}

    def measured(self, gpu: str, engine: str, model: str | None = None, precision: str | None = None) -> bool:
        """Whether the file's groups measured this deployment: its GPU has groups of ``engine``
        and, when a model is named, that model has a group there (always true for a file
        without groups, whose shared values are the user's own)."""
        if not self.groups:
            return True
        if gpu not in self._gpus_with_groups(engine):
            return False
        return model is None or self._has_model_group(gpu, engine, model, precision)

    def error_band(self, gpu: str, engine: str, model: str | None = None,
                   precision: str | None = None) -> dict[str, Any] | None:
        """The expected error of a prediction for this deployment, from the file's cross-validated
        residuals (``intervals``, written by ``servesim calibrate``): the band of the situation the
        deployment is in — its model calibrated on its GPU/engine (``seen``), its GPU/engine
        calibrated but not its model (``unseen_model``, leave-one-family-out), its GPU not
        calibrated (``unseen_gpu``, leave-one-GPU-out) — for its closest group, else for all rows
        of that situation.  None when the file has no intervals."""
        if not self.intervals:
            return None
        # the same test as :meth:`measured`: any group of the engine on this GPU makes it calibrated
        own_gpu = gpu in self._gpus_with_groups(engine)
        has_model = own_gpu and self._has_model_group(gpu, engine, model, precision)
        situation = "seen" if has_model else "unseen_model" if own_gpu else "unseen_gpu"
        table = self.intervals.get(situation) or {}
        key = f"*/{engine}" if situation == "unseen_gpu" else f"{gpu}/{engine}"
        band = table.get(key)
        if band is None:
            key, band = "*", table.get("*")
        if band is None:
            return None
        basis = (self.intervals.get("basis") or {}).get(situation, situation)
        return {"situation": situation, "basis": basis, "group": key,
                "coverage": self.intervals.get("coverage"), **band}

    def group_of(self, gpu: str, engine: str, model: str | None = None, precision: str | None = None) -> str:
        """The most specific group key that applies (``shared`` when none does)."""
        hits = [k for k in group_keys(self.gpu_source(gpu, engine), engine, model, precision) if k in self.groups]
        return hits[-1] if hits else "shared"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": 1}
        out.update(self.meta)
        out["shared"] = {k: dict(v) for k, v in self.shared.items()}
        out["groups"] = {k: {kk: dict(vv) for kk, vv in v.items()} for k, v in sorted(self.groups.items())}
        if self.clients:
            out["clients"] = {k: dict(v) for k, v in sorted(self.clients.items())}
        if self.intervals:
            out["intervals"] = dict(self.intervals)
        return out

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(_plain(self.to_dict()), sort_keys=False))


def prediction_interval(latency: dict[str, Any], band: dict[str, Any] | None,
                        why_none: str = "the calibration has no cross-validated error bands") -> dict[str, Any]:
    """Where the measured mean TTFT and TPOT are expected to lie, given the predicted means
    (``latency``: the summary's ``latency`` section) and an :meth:`Calibration.error_band`.

    A relative error e = (predicted − measured) / measured between the band's ``lo`` and ``hi``
    puts the measured value between predicted / (1 + hi) and predicted / (1 + lo)."""
    if band is None:
        return {"available": False, "reason": why_none}
    out: dict[str, Any] = {"available": True, **{k: band.get(k) for k in ("situation", "basis", "group", "coverage",
                                                                          "n")}}
    for metric in ("ttft", "tpot"):
        mean = (latency.get(f"{metric}_ms") or {}).get("mean")
        lo, hi = band[f"{metric}_lo"], band[f"{metric}_hi"]
        out[f"{metric}_ms"] = {
            "mean": mean,
            "low": None if mean is None else mean / (1.0 + hi),
            "high": None if mean is None or lo <= -1.0 else mean / (1.0 + lo),
            "error_low": lo, "error_high": hi, "mape": band[f"{metric}_mape"]}
    return out


def precision_key(precision: str | None) -> str:
    """The precision as group keys write it: every 4-bit float format is ``fp4``."""
    p = (precision or "bf16").lower()
    return "fp4" if p in ("nvfp4", "mxfp4") else p


def group_keys(gpu: str, engine: str, model: str | None = None, precision: str | None = None) -> list[str]:
    """Group keys that apply to a deployment, least specific first.

    A model's groups come under its architecture's id, then its canonical id (a short name such
    as ``DeepSeek-R1`` resolves to ``deepseek-ai/DeepSeek-R1``), then the name as given; within
    each, the group without precision before the one with it.  Every key that exists applies,
    later ones overriding: the files ``servesim calibrate`` writes hold only ``@precision``
    model groups, each with every fitted value, so there the most specific existing group wins.
    """
    keys = [f"*/{engine}", f"{gpu}/*", f"{gpu}/{engine}"]
    if model:
        hit = resolve_name(model)  # (canonical id, bundled id = the architecture) of a known name
        for name in dict.fromkeys((hit[1], hit[0], model) if hit else (model,)):
            keys.append(f"{gpu}/{engine}/{name}")
            keys.append(f"{gpu}/{engine}/{name}@{precision_key(precision)}")
    return keys


def _plain(x):
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if hasattr(x, "item"):  # numpy scalar
        return x.item()
    if isinstance(x, float):
        return float(f"{x:.6g}")
    return x


def _section(data: Any, where: str) -> dict[str, dict[str, Any]]:
    if data is None:
        return {"analytic": {}, "frontend": {}}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with 'analytic' and/or 'frontend'")
    unknown = set(data) - {"analytic", "frontend"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; expected 'analytic' and/or 'frontend'")
    return {"analytic": dict(data.get("analytic") or {}), "frontend": dict(data.get("frontend") or {})}


def parse_calibration(data: Any, label: str = "<calibration>") -> Calibration:
    """A Calibration from a loaded YAML mapping; a flat mapping is taken as shared analytic params."""
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: a calibration file must hold a mapping")
    if "shared" not in data and "groups" not in data:  # legacy flat form: {params: {...}} or {...}
        return Calibration(shared={"analytic": dict(data.get("params", data)), "frontend": {}})
    groups_raw = data.get("groups") or {}
    if not isinstance(groups_raw, dict):
        raise ConfigError(f"{label}: 'groups' must map '<gpu>/<engine>' to parameters")
    groups = {}
    for k, v in groups_raw.items():
        if "/" not in str(k):
            raise ConfigError(f"{label}: group key {k!r} must look like '<gpu>/<engine>'")
        groups[str(k)] = _section(v, f"{label}: groups.{k}")
    meta = {k: v for k, v in data.items() if k not in ("shared", "groups", "version", "clients", "intervals")}
    clients = data.get("clients") or {}
    if not isinstance(clients, dict) or not all(isinstance(v, dict) for v in clients.values()):
        raise ConfigError(f"{label}: 'clients' must map a profile name to {{frontend: {{...}}}}")
    cal = Calibration(shared=_section(data.get("shared"), f"{label}: shared"), groups=groups, meta=meta,
                      clients={str(k): dict(v) for k, v in clients.items()},
                      intervals=dict(data.get("intervals") or {}))
    _check_fields(cal, label)
    return cal


def _check_fields(cal: Calibration, label: str) -> None:
    from servesim.perf.analytic_params import AnalyticParams
    from servesim.perf.frontend import FrontendParams

    sections = ([("shared", cal.shared)] + [(f"groups.{k}", v) for k, v in cal.groups.items()]
                + [(f"clients.{k}", {"frontend": v.get("frontend") or {}}) for k, v in cal.clients.items()])
    for where, sec in sections:
        for kind, klass in (("analytic", AnalyticParams), ("frontend", FrontendParams)):
            bad = set(sec.get(kind, {})) - set(klass.model_fields)
            if bad:
                raise ConfigError(f"{label}: {where}.{kind}: unknown parameter(s) {sorted(bad)}")


def bundled_calibrations() -> list[str]:
    """Names of the calibrations shipped with servesim (``default``, ``fit-split``, ...)."""
    return sorted(f.stem for f in DEFAULT_CALIBRATION.parent.glob("*.yaml"))


def bundled_calibration(name: str | Path) -> Path | None:
    """The file of the bundled calibration called ``name`` (a bare name, not a path), if any."""
    if isinstance(name, Path) or "/" in name or "\\" in name:
        return None
    f = DEFAULT_CALIBRATION.parent / f"{name}.yaml"
    return f if f.exists() else None


def load_calibration(path: str | Path | None = None) -> Calibration:
    """Read a calibration file, or a bundled one by name (:func:`bundled_calibrations`);
    ``None`` is the bundled default.

    A missing bundled default is an error, not an empty calibration: an installation that
    lost its data files would otherwise predict with uncalibrated efficiencies, silently.
    """
    p = Path(path) if path is not None else DEFAULT_CALIBRATION
    if path is not None and not p.exists():
        p = bundled_calibration(path) or p
    if path is None and not p.exists():
        raise ConfigError(f"calibration: servesim's bundled default {str(p)!r} is missing: the installation "
                          "is incomplete (reinstall servesim), or set perf.calibration: null to run uncalibrated")
    try:
        data = yaml_io.safe_load(p.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"calibration: cannot read {str(p)!r} ({e}); bundled calibrations: "
                          f"{', '.join(bundled_calibrations())}") from None
    return parse_calibration(data or {}, str(p))


def resolve(path: str | Path | None, gpu: str, engine: str, model: str | None = None,
            precision: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Shortcut: ``load_calibration(path).resolve(gpu, engine, model, precision)``."""
    return load_calibration(path).resolve(gpu, engine, model, precision)
