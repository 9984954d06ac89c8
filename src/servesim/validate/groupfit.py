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
from servesim.validate.sensitivity import KNOBS, BaseParams, PointSensitivity

#: Physical ranges of the fitted parameters (each a quantity the op-level model or the engine
#: has, not a free knob):
#: - ``mem_eff`` / ``attn_decode_mem_eff``: the HBM bandwidth fraction streaming kernels reach.
#:   Copy microbenchmarks reach ~90-93% of the spec-sheet bandwidth on H100, H200 and B200
#:   (e.g. NVIDIA's nvbandwidth, STREAM ports) and ~80-85% on MI300X; nothing streams faster.
#:   The serving frameworks' weight-streaming GEMMs reach 0.8-0.9 (the kernel tables'
#:   ``achievable.hbm``); below ~0.65 a fit is standing in for something else.
#: - ``gemm_eff_max``: the dense-peak fraction large GEMMs reach; cuBLASLt / hipBLASLt reach
#:   ~75-85% of dense peak on large bf16 and fp8 shapes, so 0.85 is the ceiling; the frameworks'
#:   large GEMMs measure 0.55-0.8 in the kernel tables, so 0.55 is the floor.  (With a floor of
#:   0.3, SGLang's B200 group sat on it: the fit was slowing every prefill 2.6× to absorb a TTFT
#:   effect the model lacks, and an unmeasured model on H200 got a slower prefill than on H100.)
#:   On a GPU whose measured ceiling is lower (AMD's max-achievable FLOPs: 49-65% of the spec
#:   sheet's peak, since clocks drop under dense load) the floor is the same share of that
#:   ceiling as 0.55 is of 0.85: :data:`GEMM_FLOOR_OF_CEILING`.
#: - ``graph_layer_overhead_s``: the fixed time of a layer inside a CUDA graph: the gaps between
#:   a layer's ~10 kernels replayed back to back, a few microseconds (near zero; the op-level
#:   model's own value is 2 µs).
#: - ``scheduler_pass_s`` / ``scheduler_per_request_s``: the engine's CPU time per pass and per
#:   request in it (Python schedulers: ~0.2-3 ms a pass, ~5-30 µs a request).
#: - ``comm_time_scale``: collectives against the link model; held at 1 unless ``fit_comm``.
MEM_EFF_BOUNDS = (0.65, 0.92)
GEMM_EFF_BOUNDS = (0.55, 0.85)
SCHED_BOUNDS_S = (0.0, 0.01)
STREAM_BOUNDS_S = (0.0, 0.2)
LAYER_BOUNDS_S = (0.0, 10e-6)
REQ_BOUNDS_S = (0.0, 50e-6)
RUNNING_BOUNDS_S = (0.0, 1e-3)
KV_EFF_BOUNDS = (0.6, 0.92)
COMM_SCALE_BOUNDS = (0.8, 2.0)
#: The GEMM floor as a share of the GPU's measured GEMM ceiling (below 0.55 where that ceiling is below 0.85).
GEMM_FLOOR_OF_CEILING = GEMM_EFF_BOUNDS[0] / GEMM_EFF_BOUNDS[1]
#: Prior widths: log time scale (mem, prefill), seconds per pass, seconds of stream latency
#: (client), seconds per layer, seconds per request and pass, seconds per running request
#: (client), log time scale of the KV reads, log time scale of the collectives.
PRIOR_SIGMA = np.array([0.15, 0.25, 2e-3, 0.05, 3e-6, 15e-6, 3e-4, 0.25, 0.2])
#: Pull of a GPU/engine group toward the physical values, relative to PRIOR_SIGMA × prior scale.
GPU_ENGINE_PRIOR_WEIGHT = 1.0
#: The GPU/engine values a model *without* a group of its own gets are a second fit of the
#: group's points held this much harder toward the physical values: the weakly held fit follows
#: the group's dominant models, which a new model does not share (the H200 and B200 groups are
#: mostly DeepSeek rows).  16 against 4: the same leave-one-family-out TTFT (32.8%), TPOT 20.6%
#: → 20.1%, and H100 and H200 (one compute die) predict an unmeasured model's prefill alike
#: (tests/validate/test_calibration_hardware_order.py; docs/validation.md).
GPU_ENGINE_FALLBACK_PRIOR_WEIGHT = 16.0
#: Pull of each model group toward its GPU/engine group, relative to PRIOR_SIGMA.
DEFAULT_PRIOR_SCALE = 0.25
#: Pull of a client profile toward the API server's derived values, relative to PRIOR_SIGMA ×
#: prior scale (weak: a client's own rows decide).
CLIENT_PRIOR_WEIGHT = 0.4
#: Weight of rows whose client settings are undocumented.
UNVERIFIED_WEIGHT = 0.5
#: Scale of the soft-L1 loss (relative error, or prior distance in prior widths): errors beyond
#: it count linearly, as MAPE counts them.
LOSS_SCALE = 0.1
#: Indices of GroupParams' vector a group fit moves (the client's two are fitted per client).
CLIENT_INDEX = (3, 6)
COMM_INDEX = 8


def physical_prior(base: "BaseParams") -> "GroupParams":
    """The values a group is pulled toward: the op-level model's own parameters
    (:class:`~servesim.perf.analytic_params.AnalyticParams` defaults, set from microbenchmarks and
    the kernels' structure), no extra scheduler time beyond a typical pass and request cost,
    collectives as the link model prices them."""
    from servesim.perf.analytic_params import AnalyticParams

    d = AnalyticParams()
    return GroupParams(-math.log(d.mem_eff), -math.log(d.gemm_eff_max), 1e-3, 0.0, d.graph_layer_overhead_s,
                       5e-6, 0.0, -math.log(d.attn_decode_mem_eff), math.log(d.comm_time_scale))


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
        """(analytic, engine frontend) overrides this group's values stand for (``base`` gives
        the ratio of ``attn_prefill_eff_max`` to ``gemm_eff_max``).  The client's two values
        are not a group's: :meth:`client_values`."""
        ratio = base.attn_prefill_eff_max / base.gemm_eff_max
        eager_extra = base.layer_overhead_s - base.graph_layer_overhead_s
        analytic = {"mem_eff": self.mem_eff, "gemm_eff_max": self.gemm_eff_max,
                    "attn_prefill_eff_max": self.gemm_eff_max * ratio,
                    "graph_layer_overhead_s": self.layer_s, "layer_overhead_s": self.layer_s + eager_extra,
                    "attn_decode_mem_eff": self.kv_eff, "comm_time_scale": self.comm_scale}
        frontend = {"scheduler_pass_s": self.sched_s, "scheduler_per_request_s": self.req_s}
        return analytic, frontend


def _bounds(fit_comm: bool = False) -> tuple[np.ndarray, np.ndarray]:
    lo = [-math.log(MEM_EFF_BOUNDS[1]), -math.log(GEMM_EFF_BOUNDS[1]), SCHED_BOUNDS_S[0], STREAM_BOUNDS_S[0],
          LAYER_BOUNDS_S[0], REQ_BOUNDS_S[0], RUNNING_BOUNDS_S[0], -math.log(KV_EFF_BOUNDS[1]),
          math.log(COMM_SCALE_BOUNDS[0]) if fit_comm else 0.0]
    hi = [-math.log(MEM_EFF_BOUNDS[0]), -math.log(GEMM_EFF_BOUNDS[0]), SCHED_BOUNDS_S[1], STREAM_BOUNDS_S[1],
          LAYER_BOUNDS_S[1], REQ_BOUNDS_S[1], RUNNING_BOUNDS_S[1], -math.log(KV_EFF_BOUNDS[0]),
          math.log(COMM_SCALE_BOUNDS[1]) if fit_comm else 0.0]
    return np.array(lo), np.array(hi)


def _gpu_spec(gpu: str):
    """The bundled spec of a group's GPU, or None for a name servesim does not know."""
    try:
        from servesim.hardware.gpu import load_gpu

        return load_gpu(gpu)
    except Exception:
        return None


def gpu_bounds(gpu: str, fit_comm: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_bounds` with the efficiencies capped by the GPU's measured ceilings
    (``GPUSpec.achievable``: the op-level model caps them there too, so a fit above them would
    move nothing in a simulation): HBM for ``mem_eff`` and ``attn_decode_mem_eff``, the best
    precision's GEMM ceiling for ``gemm_eff_max``."""
    lo, hi = _bounds(fit_comm)
    spec = _gpu_spec(gpu)
    if spec is None:  # an unknown GPU name: the generic bounds
        return lo, hi
    ach = getattr(spec, "achievable", {}) or {}
    hbm = min(MEM_EFF_BOUNDS[1], float(ach.get("hbm", 1.0)))
    gemm = min(GEMM_EFF_BOUNDS[1], max([float(v) for k, v in ach.items()
                                        if k != "hbm" and not k.startswith("stream_")] or [1.0]))
    lo[0] = max(lo[0], -math.log(hbm))
    lo[7] = max(lo[7], -math.log(min(KV_EFF_BOUNDS[1], hbm)))
    lo[1] = max(lo[1], -math.log(gemm))
    hi[1] = max(hi[1], -math.log(gemm * GEMM_FLOOR_OF_CEILING))
    return lo, np.maximum(hi, lo)


def _weight(s: PointSensitivity) -> float:
    return UNVERIFIED_WEIGHT if s.point.row.get("workload") == "fixed_lengths_unverified" else 1.0


class Surrogate:
    """The linear surrogate of many points as arrays: a group's trial values price every point
    in one vectorised step (the fit evaluates it thousands of times)."""

    def __init__(self, pts: Sequence[PointSensitivity], default_base: BaseParams) -> None:
        self.pts = list(pts)
        n = len(self.pts)
        bases = [s.base or default_base for s in self.pts]
        self.b = {name: np.array([getattr(b, name) for b in bases], dtype=float) for name in (
            "mem_eff", "gemm_eff_max", "scheduler_pass_s", "graph_layer_overhead_s", "scheduler_per_request_s",
            "attn_decode_mem_eff", "comm_time_scale")}
        self.ttft_base = np.array([s.ttft_base for s in self.pts], dtype=float)
        self.tpot_base = np.array([s.tpot_base for s in self.pts], dtype=float)
        self.st = np.array([[s.ttft_slope[k] for k in KNOBS] for s in self.pts], dtype=float).reshape(n, len(KNOBS))
        self.sp = np.array([[s.tpot_slope[k] for k in KNOBS] for s in self.pts], dtype=float).reshape(n, len(KNOBS))
        self.layers = np.array([s.layers for s in self.pts], dtype=float)
        self.running = np.array([s.first_token_running for s in self.pts], dtype=float)
        self.mt = np.array([s.point.measured_ttft_ms for s in self.pts], dtype=float)
        self.mp = np.array([s.point.measured_tpot_ms for s in self.pts], dtype=float)
        self.w = np.array([_weight(s) for s in self.pts], dtype=float)
        #: the client-side stream latency and per-running-request latency of each point (set by the fit)
        self.stream_s = np.zeros(n)
        self.running_s = np.zeros(n)

    def subset(self, idx: np.ndarray) -> "Surrogate":
        out = object.__new__(Surrogate)
        out.pts = [self.pts[i] for i in idx]
        out.b = {k: v[idx] for k, v in self.b.items()}
        for name in ("ttft_base", "tpot_base", "st", "sp", "layers", "running", "mt", "mp", "w", "stream_s",
                     "running_s"):
            setattr(out, name, getattr(self, name)[idx])
        return out

    def engine_times(self, x: np.ndarray | Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(TTFT without the client's stream terms, TPOT) in ms at group values ``x`` (one
        vector for all points, or an (n, 9) array of per-point vectors)."""
        x = np.asarray(x, dtype=float)
        col = (lambda j: x[:, j]) if x.ndim == 2 else (lambda j: x[j])
        b = self.b
        d = np.stack([b["mem_eff"] * np.exp(col(0)) - 1.0,  # base mem_eff / mem_eff - 1
                      b["gemm_eff_max"] * np.exp(col(1)) - 1.0,
                      (col(2) - b["scheduler_pass_s"]) + self.layers * (col(4) - b["graph_layer_overhead_s"]),
                      col(5) - b["scheduler_per_request_s"],
                      b["attn_decode_mem_eff"] * np.exp(col(7)) - 1.0,
                      np.exp(col(8)) / b["comm_time_scale"] - 1.0], axis=1)
        return self.ttft_base + np.sum(self.st * d, axis=1), self.tpot_base + np.sum(self.sp * d, axis=1)

    def times(self, x) -> tuple[np.ndarray, np.ndarray]:
        ttft, tpot = self.engine_times(x)
        return ttft + (self.stream_s + self.running_s * self.running) * 1e3, tpot

    def residuals(self, x, objective: str = "relative") -> np.ndarray:
        ttft, tpot = self.times(x)
        ttft, tpot = np.maximum(ttft, 1e-3), np.maximum(tpot, 1e-3)
        if objective == "log":
            rt, rp = np.log(ttft / self.mt), np.log(tpot / self.mp)
        else:
            rt, rp = (ttft - self.mt) / self.mt, (tpot - self.mp) / self.mp
        return np.concatenate([self.w * rt, self.w * rp])


def fit_group(pts: Sequence[PointSensitivity] | Surrogate, base: BaseParams, prior: GroupParams,
              prior_weight: float = 1.0, objective: str = "relative", fit_comm: bool = False) -> tuple[GroupParams, float]:
    """Robust least-squares engine values of one group under a prior centred on ``prior``.

    Soft-L1 loss with scale :data:`LOSS_SCALE` on the point errors and the prior terms alike.
    The client's two values (:data:`CLIENT_INDEX`) stay where ``prior`` has them: they are the
    points' client profiles' (:class:`Surrogate` ``stream_s`` / ``running_s``), not the group's.
    """
    sur = pts if isinstance(pts, Surrogate) else Surrogate(pts, base)
    lo, hi = gpu_bounds(sur.pts[0].point.gpu, fit_comm) if sur.pts else _bounds(fit_comm)
    centre = np.clip(prior.vector(), lo, hi)
    free = np.ones(len(centre), dtype=bool)
    free[list(CLIENT_INDEX)] = False
    if not fit_comm:
        free[COMM_INDEX] = False
    centre[~free] = 0.0

    def full(xf: np.ndarray) -> np.ndarray:
        x = centre.copy()
        x[free] = xf
        return x

    def fun(xf: np.ndarray) -> np.ndarray:
        prior_res = prior_weight * (xf - centre[free]) / PRIOR_SIGMA[free]
        return np.concatenate([sur.residuals(full(xf), objective), prior_res])

    x0 = np.clip(centre[free], lo[free] + 1e-12, hi[free] - 1e-12)
    res = least_squares(fun, x0, bounds=(lo[free], hi[free]), loss="soft_l1", f_scale=LOSS_SCALE,
                        x_scale=PRIOR_SIGMA[free])
    x = full(res.x)
    data = sur.residuals(x, objective)
    return GroupParams.of(x), float(np.sqrt(np.mean(data ** 2))) if data.size else 0.0


def _free_mask(fit_comm: bool) -> np.ndarray:
    free = np.ones(len(PRIOR_SIGMA), dtype=bool)
    free[list(CLIENT_INDEX)] = False
    if not fit_comm:
        free[COMM_INDEX] = False
    return free


#: Indices of GroupParams' vector that are the engine's host CPU time (per pass, per request):
#: fitted per engine, shared by its GPU/engine groups (the scheduler's Python runs on the host,
#: whatever GPU it drives), so rows of any GPU teach an engine's CPU cost.
HOST_INDEX = (2, 5)


def _engine_of(group_key: str) -> str:
    return group_key.split("/", 2)[1] if "/" in group_key else group_key


#: Index of the prefill (GEMM efficiency) knob in a group's vector.
PREFILL_INDEX = 1


def _compute_identity(gpu: str) -> tuple | None:
    """What a GPU's compute is made of (vendor, dense peaks, SM count): H100 and H200 are the
    same die with different memory, so a GEMM runs alike on both (their kernel tables' ceilings
    differ by a percent, which is the tables' noise)."""
    spec = _gpu_spec(gpu)
    if spec is None:
        return None
    return (spec.vendor, tuple(sorted(spec.tflops.items())), spec.sm_count)


def shared_compute_leaders(keys: Sequence[str]) -> dict[int, int]:
    """For groups of one engine on GPUs of identical compute (:func:`_compute_identity`), the
    index of the group whose GEMM efficiency the others share (the first in ``keys``).

    The GEMM efficiency is a property of the kernels on the silicon; fitted apart, two such
    groups let each campaign's quirks in (H200's TensorRT-LLM group once fitted 0.68 against
    H100's 0.80), and switching GPU then compares campaigns, not hardware."""
    leaders: dict[tuple, int] = {}
    out: dict[int, int] = {}
    for gi, key in enumerate(keys):
        gpu = key.split("/", 1)[0]
        ident = _compute_identity(gpu)
        if ident is None:
            continue
        slot = (_engine_of(key), ident)
        if slot in leaders:
            out[gi] = leaders[slot]
        else:
            leaders[slot] = gi
    return out


def fit_groups_and_clients(sur: Surrogate, groups: dict[str, np.ndarray], client_of: Sequence[str],
                           prior: GroupParams, prior_weight: float, objective: str = "relative",
                           fit_comm: bool = False, prior_scale: float = DEFAULT_PRIOR_SCALE) -> tuple[dict[str, GroupParams], dict[str, tuple[float, float]]]:
    """One joint fit of every GPU/engine group's device values, every engine's host CPU times
    (:data:`HOST_INDEX`, shared by that engine's groups) and every client's two stream values:
    a client's rows span many groups and both move TTFT, so fitting them in turn converges
    slowly.  ``groups``: point indices per group (points in none keep ``prior``'s values);
    groups and engines are pulled toward ``prior`` with ``prior_weight``, clients weakly toward
    the API server's derived values."""
    from scipy.sparse import lil_matrix

    from servesim.perf.clients import BUILTIN_PROFILES

    lo_all, hi_all = _bounds(fit_comm)
    free = _free_mask(fit_comm)
    host = np.zeros(len(PRIOR_SIGMA), dtype=bool)
    host[list(HOST_INDEX)] = True
    dev = free & ~host
    nf = int(dev.sum())
    centre = np.clip(prior.vector(), lo_all, hi_all)
    centre[~free] = 0.0
    keys = sorted(groups)
    engines = sorted({_engine_of(k) for k in keys})
    per_gpu = {key: gpu_bounds(key.split("/", 1)[0], fit_comm) for key in keys}
    names = sorted(set(client_of))
    api = BUILTIN_PROFILES["api-server"].values
    c_centre = np.array([api["first_token_overhead_s"], api["stream_per_running_s"]])
    c_sigma = np.array([PRIOR_SIGMA[3], PRIOR_SIGMA[6]])
    n = len(sur.pts)
    g_of = np.full(n, -1)
    for gi, key in enumerate(keys):
        g_of[groups[key]] = gi
    e_of_group = np.array([engines.index(_engine_of(k)) for k in keys], dtype=int)
    c_of = np.array([names.index(c) for c in client_of], dtype=int)
    ng, ne, nc = len(keys), len(engines), len(names)
    nh = len(HOST_INDEX)
    o_e, o_c = ng * nf, ng * nf + ne * nh
    n_par = o_c + 2 * nc
    if n == 0 or n_par == 0:  # nothing to fit (an empty fold of a cross-validation)
        return {}, {}
    leader = shared_compute_leaders(keys)
    prefill_col = int(np.flatnonzero(dev).tolist().index(PREFILL_INDEX))
    followers = np.array(sorted(leader), dtype=int)
    leaders_of = np.array([leader[f] for f in followers], dtype=int)

    def unpack(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        per_group = np.tile(centre, (ng + 1, 1))  # the last row: points in no group (the prior)
        per_group[:ng, dev] = x[:o_e].reshape(ng, nf)
        if followers.size:  # identical compute: the leader's GEMM efficiency
            per_group[followers, PREFILL_INDEX] = per_group[leaders_of, PREFILL_INDEX]
        per_group[:ng, list(HOST_INDEX)] = x[o_e:o_c].reshape(ne, nh)[e_of_group]
        return per_group, x[o_c:].reshape(nc, 2)

    def fun(x: np.ndarray) -> np.ndarray:
        per_group, cl = unpack(x)
        sur.stream_s, sur.running_s = cl[c_of, 0], cl[c_of, 1]
        data = sur.residuals(per_group[g_of], objective)
        gp = prior_weight * (x[:o_e].reshape(ng, nf) - centre[dev]) / PRIOR_SIGMA[dev]
        hp = prior_weight * (x[o_e:o_c].reshape(ne, nh) - centre[list(HOST_INDEX)]) / PRIOR_SIGMA[list(HOST_INDEX)]
        cp = CLIENT_PRIOR_WEIGHT * prior_scale * (x[o_c:].reshape(nc, 2) - c_centre) / c_sigma
        return np.concatenate([data, gp.ravel(), hp.ravel(), cp.ravel()])

    sparsity = lil_matrix((2 * n + n_par, n_par), dtype=int)
    for i in range(n):
        cols = list(range(o_c + 2 * c_of[i], o_c + 2 * c_of[i] + 2))
        if g_of[i] >= 0:
            e = e_of_group[g_of[i]]
            cols += list(range(g_of[i] * nf, (g_of[i] + 1) * nf)) + list(range(o_e + e * nh, o_e + (e + 1) * nh))
            if g_of[i] in leader:
                cols.append(leader[g_of[i]] * nf + prefill_col)
        for r in (i, n + i):
            sparsity[r, cols] = 1
    for j in range(n_par):
        sparsity[2 * n + j, j] = 1
    h_lo, h_hi = lo_all[list(HOST_INDEX)], hi_all[list(HOST_INDEX)]
    lo = np.concatenate([*(per_gpu[k][0][dev] for k in keys), np.tile(h_lo, ne),
                         np.tile([STREAM_BOUNDS_S[0], RUNNING_BOUNDS_S[0]], nc)])
    hi = np.concatenate([*(per_gpu[k][1][dev] for k in keys), np.tile(h_hi, ne),
                         np.tile([STREAM_BOUNDS_S[1], RUNNING_BOUNDS_S[1]], nc)])
    x0 = np.clip(np.concatenate([np.tile(centre[dev], ng), np.tile(centre[list(HOST_INDEX)], ne),
                                 np.tile(c_centre, nc)]), lo + 1e-12, hi - 1e-12)
    scale = np.concatenate([np.tile(PRIOR_SIGMA[dev], ng), np.tile(PRIOR_SIGMA[list(HOST_INDEX)], ne),
                            np.tile(c_sigma, nc)])
    res = least_squares(fun, x0, bounds=(lo, hi), loss="soft_l1", f_scale=LOSS_SCALE, x_scale=scale,
                        jac_sparsity=sparsity)
    per_group, cl = unpack(res.x)
    sur.stream_s, sur.running_s = cl[c_of, 0], cl[c_of, 1]
    return ({key: GroupParams.of(per_group[gi]) for gi, key in enumerate(keys)},
            {name: (float(cl[ci, 0]), float(cl[ci, 1])) for ci, name in enumerate(names)})


def _with_host(prior: GroupParams, engine_values: GroupParams) -> GroupParams:
    """``prior`` with the engine's host CPU times (:data:`HOST_INDEX`) from ``engine_values``."""
    x = prior.vector()
    x[list(HOST_INDEX)] = engine_values.vector()[list(HOST_INDEX)]
    return GroupParams.of(x)


def model_key(s: PointSensitivity) -> str:
    p = s.point
    return f"{p.group}/{p.model}@{precision_key(p.precision)}"


@dataclass
class _Tree:
    """What one pass of the hierarchy fitted: every group's values (GPU/engine as the models'
    parent and as the fallback a model without a group gets; model groups)."""

    parent: dict[str, GroupParams]
    fallback: dict[str, tuple[GroupParams, float]]
    models: dict[str, tuple[GroupParams, float]]
    parent_rms: dict[str, float]

    def point_values(self, s: PointSensitivity, prior: GroupParams) -> np.ndarray:
        m = self.models.get(model_key(s))
        if m is not None:
            return m[0].vector()
        g = self.fallback.get(s.point.group)
        return (g[0] if g is not None else prior).vector()


def _fit_tree(sur: Surrogate, base: BaseParams, prior: GroupParams, min_group_points: int, min_model_points: int,
              prior_scale: float, objective: str, fallback_prior_weight: float, fit_comm: bool,
              client_of: Sequence[str]) -> tuple[_Tree, dict[str, tuple[float, float]]]:
    """GPU/engine groups and clients jointly, then each group's fallback and model groups with
    the clients fixed."""
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(sur.pts):
        by_group[s.point.group].append(i)
    fitted = {k: np.array(v) for k, v in by_group.items() if len(v) >= min_group_points}
    parents, clients = fit_groups_and_clients(sur, fitted, client_of, prior,
                                              GPU_ENGINE_PRIOR_WEIGHT * prior_scale, objective, fit_comm, prior_scale)
    tree = _Tree({}, {}, {}, {})
    for key in sorted(fitted):
        idx = fitted[key]
        gsur = sur.subset(idx)
        gp = parents[key]
        grms = float(np.sqrt(np.mean(gsur.residuals(gp.vector(), objective) ** 2)))
        tree.parent[key], tree.parent_rms[key] = gp, grms
        fallback = (gp, grms)
        if fallback_prior_weight != GPU_ENGINE_PRIOR_WEIGHT and prior_scale > 0:
            fallback = fit_group(gsur, base, _with_host(prior, gp), prior_weight=fallback_prior_weight * prior_scale,
                                 objective=objective, fit_comm=fit_comm)
        tree.fallback[key] = fallback
        by_model: dict[str, list[int]] = defaultdict(list)
        for i in idx:
            by_model[model_key(sur.pts[i])].append(i)
        for mkey in sorted(by_model):
            if len(by_model[mkey]) < min_model_points:
                continue
            tree.models[mkey] = fit_group(sur.subset(np.array(by_model[mkey])), base, gp, prior_weight=prior_scale,
                                          objective=objective, fit_comm=fit_comm)
    if fallback_prior_weight != GPU_ENGINE_PRIOR_WEIGHT and prior_scale > 0:
        _share_fallback_gemm(tree, fitted, sur, base, prior, fallback_prior_weight * prior_scale, objective, fit_comm)
    return tree, clients


def _share_fallback_gemm(tree: _Tree, fitted: dict[str, np.ndarray], sur: Surrogate, base: BaseParams,
                         prior: GroupParams, weight: float, objective: str, fit_comm: bool) -> None:
    """The fallbacks of groups on identical compute (:func:`shared_compute_leaders`) take one GEMM
    efficiency: that of a fallback fit on all their points together."""
    keys = sorted(fitted)
    members: dict[int, list[int]] = defaultdict(list)
    for follower, lead in shared_compute_leaders(keys).items():
        members[lead].append(follower)
    for lead, followers in members.items():
        names = [keys[lead]] + [keys[f] for f in followers]
        union = np.concatenate([fitted[k] for k in names])
        shared, _ = fit_group(sur.subset(union), base, _with_host(prior, tree.parent[keys[lead]]),
                              prior_weight=weight, objective=objective, fit_comm=fit_comm)
        for key in names:
            x = tree.fallback[key][0].vector()
            x[PREFILL_INDEX] = shared.vector()[PREFILL_INDEX]
            rms = float(np.sqrt(np.mean(sur.subset(fitted[key]).residuals(x, objective) ** 2)))
            tree.fallback[key] = (GroupParams.of(x), rms)


def fit_hierarchy(sens: Sequence[PointSensitivity], base: BaseParams, min_group_points: int = MIN_GROUP_POINTS,
                  min_model_points: int = 3, say: Callable[[str], None] = lambda m: None,
                  prior_scale: float = DEFAULT_PRIOR_SCALE, objective: str = "relative",
                  fallback_prior_weight: float = GPU_ENGINE_FALLBACK_PRIOR_WEIGHT,
                  groups: bool = True, fit_comm: bool = False) -> Calibration:
    """Fit client profiles, ``<gpu>/<engine>`` groups and model groups; write a :class:`Calibration`.

    The tree: the physical values (:func:`physical_prior`, written as the file's ``shared``
    section, so a GPU with no same-vendor relative in the file gets physics, never another
    vendor's fit) → ``<gpu>/<engine>`` (≥ ``min_group_points``; pulled toward the physical values
    with weight :data:`GPU_ENGINE_PRIOR_WEIGHT` × ``prior_scale``) → ``<gpu>/<engine>/<model>@<precision>``
    (≥ ``min_model_points``; pulled toward its GPU/engine group with weight ``prior_scale``).
    The client profiles (:mod:`servesim.perf.clients`; each row's from its ``source``) are fitted
    jointly with the GPU/engine groups (:func:`fit_groups_and_clients`), each on its own rows
    only; they are written to the file's ``clients:`` section, never to a group.  Each GPU/engine group is fitted twice: weakly held, as the model groups' parent, and
    held ``fallback_prior_weight`` × ``prior_scale`` toward the physical values, as what the file
    stores for models without a group.  ``groups=False`` stops after the clients (every deployment
    then gets the physical values).
    """
    ok = [s for s in sens if s.status == "ok" and math.isfinite(s.tpot_base) and math.isfinite(s.ttft_base)]
    lacking = [s.point.id for s in ok if s.missing_knobs]
    if lacking:
        raise ValueError(f"{len(lacking)} point(s) have no slopes for some knobs (e.g. {lacking[0]}); "
                         f"measure them first (sensitivity.measure_missing_knobs)")
    prior = physical_prior(base)
    sur = Surrogate(ok, base)
    client_of = [s.point.client for s in ok]
    tree, clients = _fit_tree(sur, base, prior, min_group_points if groups else 10 ** 9, min_model_points,
                              prior_scale, objective, fallback_prior_weight, fit_comm, client_of)
    a, f = prior.overrides(base)
    cal = Calibration(shared={"analytic": a, "frontend": f})
    engine_x = np.array([tree.point_values(s, prior) for s in ok]).reshape(len(ok), len(PRIOR_SIGMA))
    data = sur.residuals(engine_x, objective) if ok else np.zeros(0)
    rms = float(np.sqrt(np.mean(data ** 2))) if data.size else 0.0
    cal.meta["fit"] = {"method": "sensitivity", "procedure": "physical", "objective": objective,
                       "prior_scale": prior_scale, "points": len(ok), "rms_error": round(rms, 4),
                       "group_rms_error": {}}
    for name, (stream, running) in sorted(clients.items()):
        n = client_of.count(name)
        cal.clients[name] = {"frontend": {"first_token_overhead_s": stream, "stream_per_running_s": running},
                             "points": n}
        say(f"client {name}: {n} points, first_token_overhead_s {stream * 1e3:.1f} ms, "
            f"stream_per_running_s {running * 1e6:.0f} µs")
    for key, (gp, grms) in tree.fallback.items():
        _store(cal, key, gp, base, grms)
        say(f"{key}: rms error {grms:.3f} (as the parent of its models: {tree.parent_rms[key]:.3f})")
    for mkey, (mp, mrms) in tree.models.items():
        _store(cal, mkey, mp, base, mrms)
        say(f"  {mkey}: rms error {mrms:.3f}")
    return cal


def _store(cal: Calibration, key: str, gp: GroupParams, base: BaseParams, rms: float) -> None:
    a, f = gp.overrides(base)
    cal.groups[key] = {"analytic": a, "frontend": f}
    cal.meta["fit"]["group_rms_error"][key] = round(rms, 4)


def fit_shipped(sens: Sequence[PointSensitivity]) -> Calibration:
    """The procedure the shipped calibration files are fitted with (``servesim calibrate
    --method sensitivity`` defaults), as the cross-validation refits it."""
    from servesim.validate.sensitivity import physical_base

    return fit_hierarchy(sens, physical_base())
