"""Per-point sensitivities of simulated TTFT and TPOT to the calibrated parameters.

A direct fit (``validate/calibrate.py``) re-simulates every point for every trial parameter
vector, so it can afford only a few points per group at reduced prompt counts.  The
sensitivity method simulates each point a handful of times at full prompt counts, once at a
base parameter set and once per *knob* moved by a known factor, and records how mean TTFT and
TPOT respond.  Each knob scales one group of costs:

- ``mem``: ``1 / mem_eff`` — the memory-bound work (weights and KV reads of decode passes);
- ``prefill``: ``1 / gemm_eff_max`` and ``1 / attn_prefill_eff_max`` together — compute-bound
  prefill work;
- ``sched``: ``scheduler_pass_s`` — serial CPU time added to every pass;
- ``req``: ``scheduler_per_request_s`` — serial CPU time added to every pass per request in it
  (batch bookkeeping, sampling and output hand-off scale with the batch: at hundreds of running
  requests this is milliseconds per pass, which can account for measured SGLang TPOT at
  concurrency >= 64 sitting above the GPU work alone);
- ``kv``: ``1 / attn_decode_mem_eff`` — the KV reads of decode attention.  Their time grows with
  the batch *and* each request's context, and the kernels reading them differ by engine and
  model (FlashInfer, FlashMLA, TensorRT-LLM's XQA, Triton): the batch growth of dense models'
  TPOT, whose KV is large, is not the weights' (``mem``) nor a per-request cost's (``req``);
- ``comm``: ``comm_time_scale`` — every collective (tensor-parallel all-reduce, expert-parallel
  all-to-all).  Their time grows with the pass's tokens and only exists on multi-GPU workers:
  without it, a model group's tp 1 and tp 8 rows share every time scale and the tp 8 rows' extra
  cost per token (each all-reduce of an 8k prefill moves ~100 MB) has no parameter of its own.
  A single-GPU point's slope is exactly 0 and costs no run;
- ``layer`` (derived, not simulated): ``graph_layer_overhead_s`` and ``layer_overhead_s``
  together — the fixed GPU time of each layer of every pass (small kernels do not run faster
  than a few microseconds however little work they get).  Moving it by Δ adds ``L × Δ`` to
  every pass of an ``L``-layer model, exactly what the ``sched`` knob does with ``L × Δ``, so
  its slope is the ``sched`` slope times ``L``: it costs no run.  It is the term that lets the
  fit tell a model's per-GPU weight traffic (shrinking with tensor parallelism) from its
  per-pass floor (which does not): measured small-batch TPOT of Llama-3.1-70B falls from
  15.8 ms at tp 1 to 5.8 ms at tp 8 on B200, ≈ 11 ms / tp + 4.5 ms.

Pass time is, to first order, a sum of terms each proportional to one of these scales, so a
point's TTFT and TPOT are modelled as linear in the knob values around the base
(``value = base + Σ slope_k × (knob_k − knob_k,base)``).  The fit (``validate/groupfit.py``)
then searches group parameters against that surrogate in microseconds, and ``servesim
validate`` judges the result with real simulations.  The stream latency
``first_token_overhead_s`` needs no run at all: it adds exactly to every TTFT; nor does
``stream_per_running_s``, which adds that many seconds per request decoding at each request's
first token: its TTFT slope is the base run's mean of that count (``first_token_running``).
"""

from __future__ import annotations

import copy
import csv
import hashlib
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

from servesim.errors import ServesimError
from servesim.models.arch import load_model
from servesim.perf.analytic_params import AnalyticParams
from servesim.validate.points import Point
from servesim.validate.run import check_point
from servesim.validate.simulate import simulate_point

#: The knobs, and how each variant run moves the base parameters.
KNOBS = ("mem", "prefill", "sched", "req", "kv", "comm")
#: Relative step of each knob's time scale in its variant run (mem: 1/mem_eff × 1/1.3, ...).
MEM_STEP = 1 / 1.3
KV_STEP = 1.3
COMM_STEP = 1.3
PREFILL_STEP = 1 / 0.75
#: Seconds per request and pass the ``req`` variant adds to ``scheduler_per_request_s``.
REQ_STEP_S = 20e-6


@dataclass
class BaseParams:
    """The parameter set the sensitivities are taken around (analytic + frontend values)."""

    mem_eff: float
    gemm_eff_max: float
    attn_prefill_eff_max: float
    scheduler_pass_s: float
    frontend: dict
    #: Per-layer fixed GPU time of CUDA-graph decode passes and of eager passes (the ``layer`` knob).
    graph_layer_overhead_s: float = AnalyticParams().graph_layer_overhead_s
    layer_overhead_s: float = AnalyticParams().layer_overhead_s
    #: Scheduler CPU time per request in a pass (the ``req`` knob).
    scheduler_per_request_s: float = 0.0
    #: HBM fraction decode attention reaches reading KV (the ``kv`` knob).
    attn_decode_mem_eff: float = AnalyticParams().attn_decode_mem_eff
    #: Time scale of every collective (the ``comm`` knob).
    comm_time_scale: float = AnalyticParams().comm_time_scale

    def variants(self) -> dict[str, tuple[dict, dict]]:
        """(analytic, frontend) parameters of the base run and of each knob's run."""
        fe = dict(self.frontend) | {"first_token_overhead_s": 0.0, "stream_per_running_s": 0.0,
                                    "scheduler_pass_s": self.scheduler_pass_s,
                                    "scheduler_per_request_s": self.scheduler_per_request_s}
        base_a = {"mem_eff": self.mem_eff, "gemm_eff_max": self.gemm_eff_max,
                  "attn_prefill_eff_max": self.attn_prefill_eff_max,
                  "graph_layer_overhead_s": self.graph_layer_overhead_s,
                  "layer_overhead_s": self.layer_overhead_s, "attn_decode_mem_eff": self.attn_decode_mem_eff,
                  "comm_time_scale": self.comm_time_scale}
        sched_step = max(self.scheduler_pass_s, 1e-3)
        return {
            "base": (base_a, fe),
            "mem": (base_a | {"mem_eff": self.mem_eff / self._mem_step()}, fe),
            "prefill": (base_a | {"gemm_eff_max": self.gemm_eff_max / PREFILL_STEP,
                                  "attn_prefill_eff_max": self.attn_prefill_eff_max / PREFILL_STEP}, fe),
            "sched": (base_a, fe | {"scheduler_pass_s": self.scheduler_pass_s + sched_step}),
            "req": (base_a, fe | {"scheduler_per_request_s": self.scheduler_per_request_s + REQ_STEP_S}),
            "kv": (base_a | {"attn_decode_mem_eff": self.attn_decode_mem_eff / KV_STEP}, fe),
            "comm": (base_a | {"comm_time_scale": self.comm_time_scale * COMM_STEP}, fe),
        }

    @classmethod
    def from_calibration(cls, cal) -> "BaseParams":
        """The shared values of a calibration (missing ones from :data:`DEFAULT_BASE`)."""
        return cls._of(cal.shared.get("analytic", {}), cal.shared.get("frontend", {}))

    @classmethod
    def for_point(cls, cal, point: Point) -> "BaseParams":
        """The values ``cal`` gives ``point`` (shared, then every group that matches it).

        A second sensitivity round measures each point around these, so the linear
        surrogate is taken near where the previous fit put the point's group.
        """
        analytic, frontend = point.calibration_values(cal)
        return cls._of(analytic, frontend)

    @classmethod
    def _of(cls, analytic: dict, frontend: dict) -> "BaseParams":
        a, f, d = analytic, dict(frontend), DEFAULT_BASE
        return cls(mem_eff=a.get("mem_eff", d.mem_eff), gemm_eff_max=a.get("gemm_eff_max", d.gemm_eff_max),
                   attn_prefill_eff_max=a.get("attn_prefill_eff_max", d.attn_prefill_eff_max),
                   scheduler_pass_s=f.pop("scheduler_pass_s", d.scheduler_pass_s),
                   scheduler_per_request_s=f.pop("scheduler_per_request_s", d.scheduler_per_request_s),
                   frontend={k: v for k, v in f.items()
                             if k not in ("first_token_overhead_s", "stream_per_running_s")},
                   graph_layer_overhead_s=a.get("graph_layer_overhead_s", d.graph_layer_overhead_s),
                   layer_overhead_s=a.get("layer_overhead_s", d.layer_overhead_s),
                   attn_decode_mem_eff=a.get("attn_decode_mem_eff", d.attn_decode_mem_eff),
                   comm_time_scale=a.get("comm_time_scale", d.comm_time_scale))

    def describe(self) -> dict:
        return {"mem_eff": self.mem_eff, "gemm_eff_max": self.gemm_eff_max,
                "attn_prefill_eff_max": self.attn_prefill_eff_max, "scheduler_pass_s": self.scheduler_pass_s,
                "graph_layer_overhead_s": self.graph_layer_overhead_s,
                "layer_overhead_s": self.layer_overhead_s,
                "scheduler_per_request_s": self.scheduler_per_request_s,
                "attn_decode_mem_eff": self.attn_decode_mem_eff, "comm_time_scale": self.comm_time_scale,
                "frontend": dict(self.frontend)}

    def _mem_step(self) -> float:
        """The mem variant's time scale: faster by MEM_STEP, or slower by as much where a
        faster one would need an efficiency above 1 (a base from a previous fit may sit near it)."""
        return MEM_STEP if self.mem_eff / MEM_STEP <= 1.0 else 1.0 / MEM_STEP

    def knob_deltas(self) -> dict[str, float]:
        """How far each variant moved its knob, in the knob's own unit."""
        return {"mem": self._mem_step() - 1.0, "prefill": PREFILL_STEP - 1.0,
                "sched": max(self.scheduler_pass_s, 1e-3), "req": REQ_STEP_S, "kv": KV_STEP - 1.0,
                "comm": COMM_STEP - 1.0}


#: The base the shipped calibration was measured around: the earlier quick shared fit
#: (14 points, direct method) of servesim 0.1.
DEFAULT_BASE = BaseParams(mem_eff=0.587406, gemm_eff_max=0.881076, attn_prefill_eff_max=0.301326,
                          scheduler_pass_s=0.00280709, frontend={"tokenize_per_token_s": 5.62969e-06})


def physical_base() -> BaseParams:
    """The op-level model's own values (:class:`AnalyticParams` defaults) with a typical engine
    CPU time (1 ms a pass, 5 µs a request): where the physical fit's priors are centred
    (``groupfit.physical_prior``), so tables measured around it linearise where that fit lands."""
    d = AnalyticParams()
    return BaseParams(mem_eff=d.mem_eff, gemm_eff_max=d.gemm_eff_max, attn_prefill_eff_max=d.attn_prefill_eff_max,
                      scheduler_pass_s=1e-3, frontend={}, graph_layer_overhead_s=d.graph_layer_overhead_s,
                      layer_overhead_s=d.layer_overhead_s, scheduler_per_request_s=5e-6,
                      attn_decode_mem_eff=d.attn_decode_mem_eff, comm_time_scale=d.comm_time_scale)


@dataclass
class PointSensitivity:
    """One point's measured values, base prediction and slopes (ms per knob unit)."""

    point: Point
    status: str
    ttft_base: float = math.nan  # ms, without the stream latency
    tpot_base: float = math.nan
    ttft_slope: dict | None = None
    tpot_slope: dict | None = None
    #: The parameters this point was simulated around (None: the fit's common base).
    base: BaseParams | None = None
    #: Layers of the point's model: the ``layer`` knob's slope is ``layers`` × the ``sched`` slope.
    layers: int = 0
    #: Mean requests decoding at a measured request's first token in the base run: TTFT grows by
    #: this × ``stream_per_running_s``.
    first_token_running: float = 0.0
    #: Knobs the point's file row has no slopes for (written before they existed):
    #: :func:`measure_missing_knobs` fills them.
    missing_knobs: tuple[str, ...] = ()

    def predict_at(self, mem_eff: float, gemm_eff_max: float, scheduler_pass_s: float,
                   stream_s: float, default_base: BaseParams, *,
                   graph_layer_overhead_s: float | None = None,
                   scheduler_per_request_s: float | None = None,
                   stream_per_running_s: float = 0.0,
                   attn_decode_mem_eff: float | None = None,
                   comm_time_scale: float | None = None) -> tuple[float, float]:
        """Surrogate (TTFT, TPOT) in ms at absolute parameter values (the prefill knob
        moves ``gemm_eff_max`` and ``attn_prefill_eff_max`` together; ``None`` keeps the
        base's value; the two stream latencies are absolute)."""
        b = self.base or default_base
        layer = 0.0 if graph_layer_overhead_s is None else graph_layer_overhead_s - b.graph_layer_overhead_s
        req = 0.0 if scheduler_per_request_s is None else scheduler_per_request_s - b.scheduler_per_request_s
        kv = 1.0 if attn_decode_mem_eff is None else b.attn_decode_mem_eff / attn_decode_mem_eff
        comm = 1.0 if comm_time_scale is None else comm_time_scale / b.comm_time_scale
        return self.predict(b.mem_eff / mem_eff, b.gemm_eff_max / gemm_eff_max,
                            scheduler_pass_s - b.scheduler_pass_s, stream_s,
                            layer_delta_s=layer, req_delta_s=req, stream_per_running_s=stream_per_running_s,
                            kv=kv, comm=comm)

    def predict_resolved(self, analytic: dict, frontend: dict, default_base: BaseParams) -> tuple[float, float]:
        """Surrogate (TTFT, TPOT) in ms at the values a calibration resolves for this point
        (``Calibration.resolve``); an analytic value it does not set stays at the point's base, an
        engine CPU time it does not set is 0, as a simulation takes it (``FrontendParams``'
        default: a deployment the file did not measure gets none, ``Calibration.measured``)."""
        b = self.base or default_base
        return self.predict_at(analytic.get("mem_eff", b.mem_eff), analytic.get("gemm_eff_max", b.gemm_eff_max),
                               frontend.get("scheduler_pass_s", 0.0),
                               frontend.get("first_token_overhead_s", 0.0), default_base,
                               graph_layer_overhead_s=analytic.get("graph_layer_overhead_s"),
                               scheduler_per_request_s=frontend.get("scheduler_per_request_s", 0.0),
                               stream_per_running_s=frontend.get("stream_per_running_s", 0.0),
                               attn_decode_mem_eff=analytic.get("attn_decode_mem_eff"),
                               comm_time_scale=analytic.get("comm_time_scale"))

    def predict(self, mem: float, prefill: float, sched_delta_s: float, stream_s: float, *,
                layer_delta_s: float = 0.0, req_delta_s: float = 0.0,
                stream_per_running_s: float = 0.0, kv: float = 1.0, comm: float = 1.0) -> tuple[float, float]:
        """Surrogate (TTFT, TPOT) in ms at knob values relative to the point's base.

        ``mem`` and ``prefill`` are time scales relative to the base (1 = base), ``sched_delta_s``
        seconds added to the base ``scheduler_pass_s``, ``stream_s`` the stream latency,
        ``layer_delta_s`` seconds added to every layer of every pass (``layers`` × that per pass),
        ``req_delta_s`` seconds added to the base ``scheduler_per_request_s``,
        ``stream_per_running_s`` seconds per request decoding at the first token, ``kv`` the
        decode-attention KV-read time scale relative to the base, ``comm`` the collectives' time
        scale relative to the base.
        """
        d = {"mem": mem - 1.0, "prefill": prefill - 1.0, "sched": sched_delta_s + self.layers * layer_delta_s,
             "req": req_delta_s, "kv": kv - 1.0, "comm": comm - 1.0}
        stream_ms = (stream_s + stream_per_running_s * self.first_token_running) * 1e3
        ttft = self.ttft_base + sum(self.ttft_slope[k] * d[k] for k in KNOBS) + stream_ms
        tpot = self.tpot_base + sum(self.tpot_slope[k] * d[k] for k in KNOBS)
        return ttft, tpot


def inert_knobs(point: Point) -> tuple[str, ...]:
    """Knobs that cannot move this point's times: ``comm`` on a single-GPU worker (no
    collectives).  Their slopes are 0 without a run."""
    dep = (point.config or {}).get("deployment") or {}
    gpus = int(dep.get("tp") or 1) * int(dep.get("attention_dp") or 1)
    return ("comm",) if gpus == 1 else ()


def _runs_for(point: Point, base: BaseParams, knobs: Sequence[str]) -> dict[str, tuple[dict, dict]]:
    """The variants a point needs for ``knobs``: its base and each knob that can move it."""
    variants = base.variants()
    inert = inert_knobs(point)
    return {k: variants[k] for k in ("base", *knobs) if k not in inert}


def _slopes(runs: dict[str, tuple[float, float, float]], deltas: dict[str, float],
            knobs: Sequence[str]) -> tuple[dict[str, float], dict[str, float]]:
    """(TTFT, TPOT) slopes of ``knobs`` against the base run; a knob not run (inert) has slope 0."""
    b = runs.get("ref", runs.get("base"))  # the reduced base when the knobs ran reduced
    ttft = {k: (runs[k][0] - b[0]) / deltas[k] if k in runs else 0.0 for k in knobs}
    tpot = {k: (runs[k][1] - b[1]) / deltas[k] if k in runs else 0.0 for k in knobs}
    return ttft, tpot


#: Reduced runs for the knobs' slopes (``measure_sensitivities(..., reduced=True)``): this many
#: measured requests and warm-up requests per unit of concurrency.
REDUCED_PROMPTS_PER_SLOT = 3
REDUCED_WARMUP_PER_SLOT = 1


def reduced_counts(point: Point) -> tuple[int, int] | None:
    """(num_prompts, warmup) of a point's reduced slope runs; None where they would not be smaller."""
    wl = (point.config or {}).get("workload") or {}
    conc = int(wl.get("concurrency") or 1)
    n, w = int(wl.get("num_prompts") or 0), int(wl.get("warmup") or 0)
    rn, rw = min(n, REDUCED_PROMPTS_PER_SLOT * conc), min(w, REDUCED_WARMUP_PER_SLOT * conc)
    return None if (rn, rw) == (n, w) else (rn, rw)


def _run_one(args: tuple) -> tuple[str, dict[str, tuple[float, float, float]]]:
    """Run a point's variants.  With a third element ``reduced`` (num_prompts, warmup), the base
    runs at full counts (its values are the point's prediction) and again at the reduced counts
    as ``ref``; every knob's variant runs at the reduced counts and its slope is taken against
    ``ref`` (:func:`_slopes`): a difference of two runs of the same length."""
    variants = args[1]
    reduced = args[2] if len(args) > 2 else None
    # A copy: check_point marks a refused layout on the point it is given (its config cleared),
    # and the caller digests the caller's point as loaded (``config_sha``), in a pool or not.
    point = check_point(copy.copy(args[0]))
    if point.status != "ok":
        return point.status, {}
    jobs = [(name, a, f, None) for name, (a, f) in variants.items()]
    if reduced is not None:
        jobs = [(n, a, f, None if n == "base" else reduced) for n, a, f, _ in jobs]
        a, f = variants["base"]
        jobs.insert(1, ("ref", a, f, reduced))
    out: dict[str, tuple[float, float, float]] = {}
    for name, analytic, frontend, counts in jobs:
        try:
            res = (simulate_point(point.config, analytic, frontend) if counts is None
                   else simulate_point(point.config, analytic, frontend, *counts))
        except ServesimError as e:
            return f"error: {' '.join(str(e).split())}", {}
        if not res.completed:
            return "error: no measured request completed", {}
        out[name] = (res.ttft_ms, res.tpot_ms, res.first_token_running)
    return "ok", out


def _run_jobs(jobs: list, processes: int, progress: Callable[[int, int], None] | None) -> list:
    """``_run_one`` over ``jobs``, in a process pool when asked; results in job order."""
    results = []
    if processes > 1 and len(jobs) > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(processes) as pool:
            for r in pool.imap(_run_one, jobs, chunksize=1):
                results.append(r)
                if progress:
                    progress(len(results), len(jobs))
    else:
        for job in jobs:
            results.append(_run_one(job))
            if progress:
                progress(len(results), len(jobs))
    return results


def measure_sensitivities(points: Sequence[Point], base: BaseParams | Callable[[Point], BaseParams],
                          processes: int = 1,
                          progress: Callable[[int, int], None] | None = None,
                          reduced: bool = False) -> list[PointSensitivity]:
    """Simulate every point at its base and at each knob's variant (full prompt counts).

    ``base``: one parameter set for all points, or a function giving each point its own
    (:meth:`BaseParams.for_point`, a second round around a previous fit).  ``reduced``: the
    knobs' variants run at :func:`reduced_counts` against a reduced base run of their own (the
    base prediction stays at full counts): about half the simulation for nearly the same slopes
    (benchmarks/calibration_loo.py compares them).
    """
    bases = [base(p) if callable(base) else base for p in points]
    results = _run_jobs([(p, _runs_for(p, b, KNOBS), *((reduced_counts(p),) if reduced else ()))
                         for p, b in zip(points, bases)], processes, progress)
    out = []
    for p, b, (status, runs) in zip(points, bases, results):
        s = PointSensitivity(p, status, base=b, layers=model_layers(p))
        if status == "ok":
            s.ttft_base, s.tpot_base, s.first_token_running = runs["base"]
            s.ttft_slope, s.tpot_slope = _slopes(runs, b.knob_deltas(), KNOBS)
        out.append(s)
    return out


def measure_missing_knobs(sens: Sequence[PointSensitivity], processes: int = 1,
                          progress: Callable[[int, int], None] | None = None) -> int:
    """Fill the slopes of knobs a table was written without (:attr:`PointSensitivity.missing_knobs`).

    Each such point runs at its own base and at the missing knobs' variants only, so a table
    gains a knob for two runs per point instead of the seven of a full re-measure.  The slopes
    are differences against this fresh base run; the row's base values stay.  Knobs inert at a
    point (:func:`inert_knobs`) get slope 0 without a run.  Returns how many points were measured.
    """
    todo, jobs = [], []
    for s in sens:
        if s.status != "ok" or not s.missing_knobs:
            continue
        variants = _runs_for(s.point, s.base or DEFAULT_BASE, s.missing_knobs)
        if len(variants) == 1:  # only inert knobs missing: their slopes are 0, no run needed
            _fill_missing(s, {})
        else:
            todo.append(s)
            jobs.append((s.point, variants))
    for s, (status, runs) in zip(todo, _run_jobs(jobs, processes, progress)):
        if status != "ok":
            s.status = status
            continue
        _fill_missing(s, runs)
    return len(todo)


def _fill_missing(s: PointSensitivity, runs: dict[str, tuple[float, float, float]]) -> None:
    """Add the slopes of the point's missing knobs from ``runs`` (``{}`` when none ran; inert ones at 0)."""
    ttft, tpot = _slopes(runs, (s.base or DEFAULT_BASE).knob_deltas(), s.missing_knobs)
    s.ttft_slope.update(ttft)
    s.tpot_slope.update(tpot)
    s.missing_knobs = ()


FIELDS = ["id", "status", "group", "model", "weight_dtype", "measured_ttft_ms", "measured_tpot_ms",
          "ttft_base", "tpot_base"] + [f"ttft_d_{k}" for k in KNOBS] + [f"tpot_d_{k}" for k in KNOBS]
#: The point's own base (optional columns: files from a single-base run may lack them).
#: Base values added with later knobs: files written before them lack the columns (defaults apply).
OPTIONAL_BASE = ("graph_layer_overhead_s", "layer_overhead_s", "scheduler_per_request_s", "attn_decode_mem_eff",
                 "comm_time_scale")
BASE_FIELDS = ["base_mem_eff", "base_gemm_eff_max", "base_attn_prefill_eff_max", "base_scheduler_pass_s",
               *(f"base_{n}" for n in OPTIONAL_BASE)]


#: Knobs added after tables were shipped: a file without their columns is completed by
#: :func:`measure_missing_knobs` rather than refused.
LATE_KNOBS = ("kv", "comm")

#: Digest of the point's servesim config at measuring time (files written before it lack the column).
CONFIG_FIELD = "config_sha"
#: The base run's mean requests decoding at a first token (files written before it lack the column).
RUNNING_FIELD = "first_token_running"
#: The base's frontend values (JSON): a completion run (:func:`measure_missing_knobs`) must cross
#: the same tokenizer as the table's runs, or its arrivals fall elsewhere among the passes.
FRONTEND_FIELD = "base_frontend"


def config_digest(point: Point) -> str:
    """A short digest of the config a point is simulated with: a sensitivities row is only
    valid for the config it was measured with (an engine flag or KV precision changed since
    means its slopes and base are another point's)."""
    text = json.dumps(point.config, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@lru_cache(maxsize=None)
def _layers_of(model: str) -> int:
    return load_model(model).num_layers


def model_layers(point: Point) -> int:
    """Layers of the model a simulable point runs (0 when it has no config)."""
    model = ((point.config or {}).get("deployment") or {}).get("model")
    return _layers_of(model) if model else 0


def write_sensitivities(rows: Sequence[PointSensitivity], path: str | Path, keep_other_rows: bool = False) -> None:
    """One CSV row per point (the raw material of a fit; re-fitting needs no simulation).

    ``keep_other_rows``: rows already in ``path`` for points not in ``rows`` are written back
    unchanged (columns they lack stay empty), so completing the fit rows of a table that also
    holds held-out rows loses none.
    """
    header = FIELDS + BASE_FIELDS + [CONFIG_FIELD, RUNNING_FIELD, FRONTEND_FIELD]
    others: list[dict[str, str]] = []
    if keep_other_rows and Path(path).exists():
        ids = {s.point.id for s in rows}
        with open(path, newline="") as f:
            others = [r for r in csv.DictReader(f) if r["id"] not in ids]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for s in rows:
            p = s.point
            slopes_t = [(s.ttft_slope or {}).get(k, "") for k in KNOBS]
            slopes_p = [(s.tpot_slope or {}).get(k, "") for k in KNOBS]
            b = s.base
            base = ([b.mem_eff, b.gemm_eff_max, b.attn_prefill_eff_max, b.scheduler_pass_s,
                     *(getattr(b, n) for n in OPTIONAL_BASE)] if b else [""] * len(BASE_FIELDS))
            w.writerow([p.id, s.status, p.group, p.row.get("model", ""), p.row.get("precision") or "bf16", p.measured_ttft_ms,
                        p.measured_tpot_ms, s.ttft_base, s.tpot_base, *slopes_t, *slopes_p, *base,
                        config_digest(p), s.first_token_running if s.status == "ok" else "",
                        json.dumps(b.frontend, sort_keys=True) if b else ""])
        for r in others:
            w.writerow([r.get(name, "") for name in header])


def read_sensitivities(path: str | Path, points: Sequence[Point]) -> list[PointSensitivity]:
    """Sensitivities written by :func:`write_sensitivities`, matched to ``points`` by id.

    Points absent from the file get status ``error: not in <file>``.  A row whose point is now
    simulated with another config than the one it was measured with (its ``config_sha``) is
    stale: that is an error naming the points to re-measure, not a silent fit to old slopes.
    A file written before a late knob (:data:`LATE_KNOBS`: ``kv``, ``comm``) reads with that knob
    in each point's ``missing_knobs`` (:func:`measure_missing_knobs` completes it).
    """
    from servesim.errors import ConfigError

    by_id: dict[str, dict[str, str]] = {}
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = set(FIELDS) - set(reader.fieldnames or [])
            late = tuple(k for k in LATE_KNOBS if {f"ttft_d_{k}", f"tpot_d_{k}"} <= missing)
            missing -= {f"{m}_d_{k}" for k in late for m in ("ttft", "tpot")}
            if missing == {"ttft_d_req", "tpot_d_req"}:
                raise ConfigError(f"{path}: written before the 'req' knob (scheduler_per_request_s) existed, so it "
                                  f"has no slopes for it; re-measure: servesim calibrate --points <CSV> --method "
                                  f"sensitivity [--base-calibration <previous>.yaml] --sensitivities <new file>")
            if missing:
                raise ConfigError(f"{path}: not a sensitivities file (missing columns {sorted(missing)})")
            if RUNNING_FIELD not in (reader.fieldnames or []):
                raise ConfigError(f"{path}: written before the '{RUNNING_FIELD}' column (the TTFT slope of "
                                  f"stream_per_running_s) existed, so a fit would leave that parameter at 0; "
                                  f"re-measure: servesim calibrate --points <CSV> --method sensitivity "
                                  f"[--base-calibration <previous>.yaml] --sensitivities <new file>")
            for row in reader:
                by_id[row["id"]] = row
    except OSError as e:
        raise ConfigError(f"--sensitivities: cannot read {str(path)!r} ({e})") from None
    stale = [p.id for p in points if p.id in by_id and by_id[p.id].get(CONFIG_FIELD)
             and by_id[p.id][CONFIG_FIELD] != config_digest(p)]
    if stale:
        raise ConfigError(
            f"{path}: {len(stale)} point(s) are now simulated with another config than their sensitivities "
            f"were measured with (e.g. {', '.join(stale[:3])}); re-measure them (servesim calibrate --points "
            f"<a CSV of those rows> --method sensitivity --sensitivities <new file>) and replace their rows")
    out = []
    for p in points:
        row = by_id.get(p.id)
        if row is None:
            out.append(PointSensitivity(p, f"error: not in {path}"))
            continue
        s = PointSensitivity(p, row["status"], layers=model_layers(p))
        if row.get("base_mem_eff"):
            s.base = BaseParams(float(row["base_mem_eff"]), float(row["base_gemm_eff_max"]),
                                float(row["base_attn_prefill_eff_max"]), float(row["base_scheduler_pass_s"]),
                                frontend={})
            if row.get(FRONTEND_FIELD):  # absent from older files: no frontend values
                s.base.frontend = json.loads(row[FRONTEND_FIELD])
            for name in OPTIONAL_BASE:  # absent from files written before these knobs: the defaults
                if row.get(f"base_{name}"):
                    setattr(s.base, name, float(row[f"base_{name}"]))
        if s.status == "ok":
            s.ttft_base, s.tpot_base = float(row["ttft_base"]), float(row["tpot_base"])
            s.first_token_running = float(row[RUNNING_FIELD])
            # a late knob's columns may be absent (an older file) or empty (rows kept unmeasured)
            s.missing_knobs = tuple(k for k in LATE_KNOBS if not row.get(f"tpot_d_{k}"))
            s.ttft_slope = {k: float(row[f"ttft_d_{k}"]) for k in KNOBS if k not in s.missing_knobs}
            s.tpot_slope = {k: float(row[f"tpot_d_{k}"]) for k in KNOBS if k not in s.missing_knobs}
        out.append(s)
    return out
