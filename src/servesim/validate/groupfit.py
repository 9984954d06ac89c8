"""Hierarchical calibration from per-point sensitivities (``servesim calibrate --method sensitivity``).

Given each point's base prediction and slopes (:mod:`servesim.validate.sensitivity`), the
fit moves these parameters per group against the linear surrogate instead of re-simulating:

- ``mem_eff`` (through the ``mem`` time scale), ``gemm_eff_max`` and ``attn_prefill_eff_max``
  (together, through the ``prefill`` scale), ``scheduler_pass_s`` (additive per pass: the
  engine's CPU time), ``graph_layer_overhead_s`` with ``layer_overhead_s`` (additive per layer of
  every pass: the GPU's fixed cost of a layer's kernels), ``scheduler_per_request_s`` (additive
  per request of every pass), ``first_token_overhead_s`` (additive on TTFT),
  ``stream_per_running_s`` (additive on TTFT per request decoding at the first token: the API
  server's and client's serial handling of a pass's outputs), ``attn_decode_mem_eff``
  (through the ``kv`` time scale: decode attention's KV reads) and ``comm_time_scale`` (the
  collectives of multi-GPU workers).

Every level fits all nine.  The host-side ones are the engine's code, but what they cost
depends on the model it serves: per pass, vLLM's piecewise CUDA graphs break at every attention
layer; per request, sampling runs over the model's vocabulary (gpt-oss 201k entries, Llama 128k)
and the API server detokenizes with the model's tokenizer.  Fitting them per model too lowered
split-half TPOT error on the fit rows from 12.7% to 12.4% (surrogate; docs/validation.md).

Groups form a tree: ``shared`` → ``<gpu>/<engine>`` → ``<gpu>/<engine>/<model>@<precision>``, with
``<engine>`` the measured server (:attr:`Point.group`: ATOM rows, simulated by the SGLang model,
fit ``<gpu>/atom``).
Each level is fitted on its own points with a prior that pulls it toward its parent's values
(a penalty in log-time-scale and in seconds, under the same soft-L1 loss as the errors:
quadratic near the parent, linear beyond :data:`LOSS_SCALE` prior widths; an exactly Gaussian
prior scored worse in split half, 12.0% → 12.2% TPOT), so a group with a handful of points moves
only as far as its points insist, and a group without enough points keeps its parent's values.
A model without a group (or a precision of one without its own) gets a second, more firmly held
fit of its GPU/engine group (:data:`GPU_ENGINE_FALLBACK_PRIOR_WEIGHT`): the parent the model
groups start from follows the group's dominant models, which a new model does not share.
Residuals are relative errors of mean TTFT and TPOT (what the validate score counts; log
errors are an option); rows whose client is undocumented (``fixed_lengths_unverified``)
count half, as the measured README advises.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, fields
from typing import Callable, Sequence

import numpy as np
from scipy.optimize import least_squares

from servesim.perf.calibration import MIN_GROUP_POINTS, Calibration, precision_key
from servesim.validate.sensitivity import BaseParams, PointSensitivity

#: Physical bounds of the fitted parameters.
MEM_EFF_BOUNDS = (0.2, 0.95)
GEMM_EFF_BOUNDS = (0.25, 0.95)
SCHED_BOUNDS_S = (0.0, 0.02)
STREAM_BOUNDS_S = (0.0, 3.0)
LAYER_BOUNDS_S = (0.0, 300e-6)
REQ_BOUNDS_S = (0.0, 100e-6)
RUNNING_BOUNDS_S = (0.0, 2e-3)
KV_EFF_BOUNDS = (0.2, 0.95)
#: Collectives from twice as fast as the link model (custom one-shot all-reduce kernels) to
#: four times as slow.
COMM_SCALE_BOUNDS = (0.5, 4.0)
#: Prior widths toward the parent group: log time scale (mem, prefill), seconds of scheduler
#: time, seconds of stream latency, seconds per layer, seconds per request and pass, seconds of
#: stream latency per running request, log time scale of the KV reads, log time scale of the
#: collectives.  The last is nearly free (4): split half on the fit rows (surrogate) scored TPOT
#: 12.3% / 11.9% / 11.7% / 11.6% at widths 0.2 / 1 / 2 / 4 (12.1% with the scale held at 1);
#: groups differ in it far more than in the other scales (docs/validation.md).
PRIOR_SIGMA = np.array([0.5, 0.5, 3e-3, 0.3, 40e-6, 30e-6, 1e-3, 0.5, 4.0])
#: GPU/engine groups hold tens of points and differ much from the shared fit: a weaker prior.
GPU_ENGINE_PRIOR_WEIGHT = 0.3
#: The GPU/engine values a model *without* a group of its own gets (written under
#: ``<gpu>/<engine>``) are a second fit of the group's points, pulled this much harder toward
#: the shared values.  The weakly held fit above is the parent the model groups start from; it
#: follows the group's dominant models, so a model calibration never saw got their quirks:
#: leaving each model group out in turn and predicting it from the rest (the linear surrogate,
#: all rows) gave 32.3% / 22.2% MAPE of TTFT / TPOT with that fit, 30.2% / 18.0% with this one
#: (shared values alone: 32.9% / 18.7%), at a small cost to models with too few points for a
#: group of their own that resemble the group's dominant ones (split half 11.8% → 11.9% TPOT;
#: docs/validation.md, "Models calibration never saw"; with the ``kv`` knob and host costs per model,
#: 32.4% / 22.7% against 30.2% / 18.4%).
GPU_ENGINE_FALLBACK_PRIOR_WEIGHT = 10.0
#: Pull of each group toward its parent, relative to PRIOR_SIGMA (split-half cross-validation
#: on the fit rows preferred 0.25 to 1: docs/validation.md, benchmarks/calibration_cv.py).
DEFAULT_PRIOR_SCALE = 0.25
#: Weight of rows whose client settings are undocumented.
UNVERIFIED_WEIGHT = 0.5
#: Scale of the soft-L1 loss (relative error, or prior distance in prior widths): errors beyond it
#: count linearly, as the validate score (MAPE) counts them, so a few anomalous rows pull a group
#: less.  Split-half on the fit rows (surrogate): 0.3 → 0.1 lowered TTFT / TPOT error from
#: 21.2% / 12.4% to 21.1% / 12.4% with the per-model host costs (12.7% → 12.6% TPOT without
#: them); 0.05 and 0.15 scored alike (docs/validation.md).
LOSS_SCALE = 0.1


@dataclass
class GroupParams:
    """One group's values: log time scales of the memory, prefill and KV-read work
    (log 1/efficiency) and of the collectives, and five additive times.  Absolute, so points
    measured around different bases (a second round, :meth:`BaseParams.for_point`) share one
    parameter space."""

    log_inv_mem: float  # log(1 / mem_eff)
    log_inv_gemm: float  # log(1 / gemm_eff_max); attn_prefill_eff_max keeps its ratio to it
    sched_s: float  # absolute scheduler_pass_s
    stream_s: float  # absolute first_token_overhead_s
    layer_s: float  # absolute graph_layer_overhead_s; layer_overhead_s moves with it
    req_s: float = 0.0  # absolute scheduler_per_request_s
    running_s: float = 0.0  # absolute stream_per_running_s
    log_inv_kv: float = -math.log(BaseParams.attn_decode_mem_eff)  # log(1 / attn_decode_mem_eff)
    log_comm: float = 0.0  # log(comm_time_scale)

    def vector(self) -> np.ndarray:
        """The values in field order: the fit's parameter vector (bounds and priors follow it)."""
        return np.array([getattr(self, f.name) for f in fields(self)])

    @classmethod
    def of(cls, x: np.ndarray) -> "GroupParams":
        return cls(*(float(v) for v in x[:len(fields(cls))]))

    @classmethod
    def at(cls, base: BaseParams, stream_s: float) -> "GroupParams":
        """The base's values; ``stream_per_running_s`` starts at 0 (bases never carry it)."""
        return cls(-math.log(base.mem_eff), -math.log(base.gemm_eff_max), base.scheduler_pass_s, stream_s,
                   base.graph_layer_overhead_s, base.scheduler_per_request_s, 0.0,
                   -math.log(base.attn_decode_mem_eff), math.log(base.comm_time_scale))

    @property
    def mem_eff(self) -> float:
        return math.exp(-self.log_inv_mem)

    @property
    def gemm_eff_max(self) -> float:
        return math.exp(-self.log_inv_gemm)

    @property
    def kv_eff(self) -> float:
        return math.exp(-self.log_inv_kv)

    @property
    def comm_scale(self) -> float:
        return math.exp(self.log_comm)

    def overrides(self, base: BaseParams) -> tuple[dict, dict]:
        """(analytic, frontend) overrides this group's values stand for (``base`` gives the
        ratio of ``attn_prefill_eff_max`` to ``gemm_eff_max``)."""
        ratio = base.attn_prefill_eff_max / base.gemm_eff_max
        eager_extra = base.layer_overhead_s - base.graph_layer_overhead_s
        analytic = {"mem_eff": self.mem_eff, "gemm_eff_max": self.gemm_eff_max,
                    "attn_prefill_eff_max": self.gemm_eff_max * ratio,
                    "graph_layer_overhead_s": self.layer_s, "layer_overhead_s": self.layer_s + eager_extra,
                    "attn_decode_mem_eff": self.kv_eff, "comm_time_scale": self.comm_scale}
        frontend = {"scheduler_pass_s": self.sched_s, "first_token_overhead_s": self.stream_s,
                    "scheduler_per_request_s": self.req_s, "stream_per_running_s": self.running_s}
        return analytic, frontend


def _bounds() -> tuple[np.ndarray, np.ndarray]:
    lo = [-math.log(MEM_EFF_BOUNDS[1]), -math.log(GEMM_EFF_BOUNDS[1]), SCHED_BOUNDS_S[0], STREAM_BOUNDS_S[0],
          LAYER_BOUNDS_S[0], REQ_BOUNDS_S[0], RUNNING_BOUNDS_S[0], -math.log(KV_EFF_BOUNDS[1]),
          math.log(COMM_SCALE_BOUNDS[0])]
    hi = [-math.log(MEM_EFF_BOUNDS[0]), -math.log(GEMM_EFF_BOUNDS[0]), SCHED_BOUNDS_S[1], STREAM_BOUNDS_S[1],
          LAYER_BOUNDS_S[1], REQ_BOUNDS_S[1], RUNNING_BOUNDS_S[1], -math.log(KV_EFF_BOUNDS[0]),
          math.log(COMM_SCALE_BOUNDS[1])]
    return np.array(lo), np.array(hi)


def _weight(s: PointSensitivity) -> float:
    return UNVERIFIED_WEIGHT if s.point.row.get("workload") == "fixed_lengths_unverified" else 1.0


def _residuals(x: np.ndarray, pts: Sequence[PointSensitivity], base: BaseParams,
               objective: str = "relative") -> np.ndarray:
    """Weighted errors of TTFT and TPOT for every point under the surrogate.

    ``relative``: (predicted − measured) / measured, the error the validate score (MAPE)
    counts; ``log``: log(predicted / measured), symmetric in over- and under-prediction.
    """
    g = GroupParams.of(x)
    mem_eff, gemm_eff = g.mem_eff, g.gemm_eff_max
    out = np.empty(2 * len(pts))
    log = objective == "log"
    for i, s in enumerate(pts):
        ttft, tpot = s.predict_at(mem_eff, gemm_eff, g.sched_s, g.stream_s, base, graph_layer_overhead_s=g.layer_s,
                                  scheduler_per_request_s=g.req_s, stream_per_running_s=g.running_s,
                                  attn_decode_mem_eff=g.kv_eff, comm_time_scale=g.comm_scale)
        w = _weight(s)
        mt, mp = s.point.measured_ttft_ms, s.point.measured_tpot_ms
        ttft, tpot = max(ttft, 1e-3), max(tpot, 1e-3)
        out[2 * i] = w * (math.log(ttft / mt) if log else (ttft - mt) / mt)
        out[2 * i + 1] = w * (math.log(tpot / mp) if log else (tpot - mp) / mp)
    return out


def fit_group(pts: Sequence[PointSensitivity], base: BaseParams, prior: GroupParams,
              prior_weight: float = 1.0, objective: str = "relative") -> tuple[GroupParams, float]:
    """Robust least-squares values of one group under a prior centred on ``prior``.

    Soft-L1 loss with scale :data:`LOSS_SCALE` on the point errors and the prior terms alike.
    """
    lo, hi = _bounds()
    centre = np.clip(prior.vector(), lo, hi)

    def fun(x: np.ndarray) -> np.ndarray:
        prior_res = prior_weight * (x - centre) / PRIOR_SIGMA
        return np.concatenate([_residuals(x, pts, base, objective), prior_res])

    x0 = np.clip(centre, lo + 1e-9, hi - 1e-9)
    res = least_squares(fun, x0, bounds=(lo, hi), loss="soft_l1", f_scale=LOSS_SCALE, x_scale=PRIOR_SIGMA)
    data = _residuals(res.x, pts, base, objective)
    return GroupParams.of(res.x), float(np.sqrt(np.mean(data ** 2))) if data.size else 0.0


def model_key(s: PointSensitivity) -> str:
    p = s.point
    return f"{p.group}/{p.model}@{precision_key(p.precision)}"


def fit_hierarchy(sens: Sequence[PointSensitivity], base: BaseParams, min_group_points: int = MIN_GROUP_POINTS,
                  min_model_points: int = 3, say: Callable[[str], None] = lambda m: None,
                  prior_scale: float = DEFAULT_PRIOR_SCALE, objective: str = "relative",
                  fallback_prior_weight: float = GPU_ENGINE_FALLBACK_PRIOR_WEIGHT,
                  groups: bool = True) -> Calibration:
    """Fit shared, then ``<gpu>/<engine>``, then model groups; write a :class:`Calibration`.

    ``prior_scale`` scales the pull of every group toward its parent (0: independent fits);
    ``objective``: the residual, ``relative`` or ``log`` (:func:`_residuals`).  Each GPU/engine
    group is fitted twice: weakly held, as the model groups' parent, and held
    ``fallback_prior_weight`` × ``prior_scale`` toward the shared values, as what the file
    stores for models without a group (:data:`GPU_ENGINE_FALLBACK_PRIOR_WEIGHT`).  ``groups=False``
    stops after the shared values (what a model on an unknown GPU or engine gets).
    """
    ok = [s for s in sens if s.status == "ok" and math.isfinite(s.tpot_base) and math.isfinite(s.ttft_base)]
    lacking = [s.point.id for s in ok if s.missing_knobs]
    if lacking:
        raise ValueError(f"{len(lacking)} point(s) have no slopes for some knobs (e.g. {lacking[0]}); "
                         f"measure them first (sensitivity.measure_missing_knobs)")
    start = GroupParams.at(base, float(base.frontend.get("first_token_overhead_s", 0.02)))
    shared, rms = fit_group(ok, base, start, prior_weight=0.0, objective=objective)
    say(f"shared: {len(ok)} points, rms {objective} error {rms:.3f}")
    a, f = shared.overrides(base)
    cal = Calibration(shared={"analytic": a, "frontend": dict(base.frontend) | f})
    cal.meta["fit"] = {"method": "sensitivity", "objective": objective, "prior_scale": prior_scale,
                       "points": len(ok), "shared_rms_error": round(rms, 4), "group_rms_error": {}}
    if not groups:
        return cal
    by_group: dict[str, list[PointSensitivity]] = defaultdict(list)
    for s in ok:
        by_group[s.point.group].append(s)
    for key in sorted(by_group):
        pts = by_group[key]
        if len(pts) < min_group_points:
            say(f"{key}: {len(pts)} point(s) < {min_group_points}: shared values")
            continue
        gp, grms = fit_group(pts, base, shared, prior_weight=GPU_ENGINE_PRIOR_WEIGHT * prior_scale,
                             objective=objective)
        fallback, frms = gp, grms
        if fallback_prior_weight != GPU_ENGINE_PRIOR_WEIGHT and prior_scale > 0:
            fallback, frms = fit_group(pts, base, shared, prior_weight=fallback_prior_weight * prior_scale,
                                       objective=objective)
        _store(cal, key, fallback, base, frms)
        say(f"{key}: {len(pts)} points, rms error {frms:.3f} (as the parent of its models: {grms:.3f})")
        by_model: dict[str, list[PointSensitivity]] = defaultdict(list)
        for s in pts:
            by_model[model_key(s)].append(s)
        for mkey in sorted(by_model):
            mpts = by_model[mkey]
            if len(mpts) < min_model_points:
                continue
            mp, mrms = fit_group(mpts, base, gp, prior_weight=prior_scale, objective=objective)
            _store(cal, mkey, mp, base, mrms)
            say(f"  {mkey}: {len(mpts)} points, rms error {mrms:.3f}")
    return cal


def _store(cal: Calibration, key: str, gp: GroupParams, base: BaseParams, rms: float) -> None:
    a, f = gp.overrides(base)
    cal.groups[key] = {"analytic": a, "frontend": f}
    cal.meta["fit"]["group_rms_error"][key] = round(rms, 4)


def fit_shipped(sens: Sequence[PointSensitivity]) -> Calibration:
    """The procedure the shipped calibration files are fitted with (``servesim calibrate
    --method sensitivity`` defaults), as the cross-validation refits it."""
    from servesim.validate.sensitivity import DEFAULT_BASE

    return fit_hierarchy(sens, DEFAULT_BASE)
