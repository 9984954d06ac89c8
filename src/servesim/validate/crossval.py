"""Cross-validation of a calibration procedure on measured points: the honest accuracy figure.

A random split (``servesim validate --split holdout``) scores rows whose model and GPU the fit
saw on other rows of the same campaign; it hides how a prediction does on a deployment nobody
measured.  Here every *model family* (or every *GPU*) is held out in turn: the calibration is
refitted on the other rows and the held-out rows are scored with what the refit gives them
(for a held-out GPU, whatever it inherits; for a held-out family, its GPU/engine values).

Refitting needs no simulation: each point's mean TTFT and TPOT are modelled as linear in the
fitted parameters around the values its table was measured at (the per-point sensitivities of
:mod:`servesim.validate.sensitivity`), so one refit takes seconds.  ``benchmarks/calibration_loo.py``
checks that surrogate against real simulations on a sample of held-out rows.

    servesim validate --points calibration.csv --cv family --sensitivities TABLE.csv
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from servesim.perf.calibration import Calibration
from servesim.validate.sensitivity import DEFAULT_BASE, PointSensitivity

#: Model families: a held-out family leaves out every checkpoint and size of one lineage (the
#: DeepSeek-V3 architecture's R1, R1-0528, V3.1 and NVFP4 checkpoints together; Llama-3.1 8B and
#: 70B together; Qwen3 dense and MoE together), so no sibling of the held-out model stays in the fit.
FAMILY_PATTERNS: tuple[tuple[str, str], ...] = (
    ("DeepSeek-V3", r"deepseek"),
    ("Kimi-K2", r"kimi-k2"),
    ("Llama-3", r"llama-3"),
    ("Qwen3", r"qwen3"),
    ("gpt-oss", r"gpt-oss"),
    ("MiniMax-M2", r"minimax-m2"),
    ("GLM", r"glm-"),
)

#: What can be held out in turn (``halves``: two random halves by a hash of the id, each held
#: out in turn: the error where model and GPU are both in the fit, on any set of rows).
CV_KINDS = ("family", "gpu", "split", "halves")


def model_family(model: str) -> str:
    """The family of a Hugging Face model id (:data:`FAMILY_PATTERNS`; else the name before its
    first size or version suffix)."""
    low = model.lower()
    for family, pattern in FAMILY_PATTERNS:
        if re.search(pattern, low):
            return family
    base = model.rsplit("/", 1)[-1]
    return re.split(r"-(?=\d)", base, maxsplit=1)[0]


def fold_of(s: PointSensitivity, kind: str) -> str:
    """The fold a point belongs to when ``kind`` is held out."""
    if kind == "family":
        return model_family(s.point.model)
    if kind == "gpu":
        return s.point.gpu
    if kind == "split":
        from servesim.validate.points import in_fit_part

        return "fit" if in_fit_part(s.point.id) else "holdout"
    if kind == "halves":
        return f"half {int(hashlib.sha256(s.point.id.encode()).hexdigest(), 16) % 2}"
    raise ValueError(f"cross-validation: unknown kind {kind!r}; expected one of {', '.join(CV_KINDS)}")


@dataclass
class HeldOut:
    """One held-out point's surrogate prediction and measurement."""

    id: str
    fold: str
    group: str  # <gpu>/<backend>/<model>@<precision>
    measured_ttft_ms: float
    measured_tpot_ms: float
    ttft_ms: float
    tpot_ms: float

    @property
    def ttft_err(self) -> float:
        return (self.ttft_ms - self.measured_ttft_ms) / self.measured_ttft_ms

    @property
    def tpot_err(self) -> float:
        return (self.tpot_ms - self.measured_tpot_ms) / self.measured_tpot_ms


@dataclass
class CVResult:
    kind: str
    rows: list[HeldOut] = field(default_factory=list)
    #: Ids of held-out points the predictor could not price (a simulation that failed).
    unpriced: list[str] = field(default_factory=list)

    def score(self, rows: Sequence[HeldOut] | None = None) -> dict[str, float]:
        """MAPE, share within 20% and mean signed error of TTFT and TPOT over ``rows`` (all)."""
        rows = self.rows if rows is None else rows
        t = np.array([r.ttft_err for r in rows])
        p = np.array([r.tpot_err for r in rows])
        if not len(rows):
            return {"n": 0}
        return {"n": len(rows), "ttft_mape": float(np.mean(np.abs(t))), "ttft_within_20": float(np.mean(np.abs(t) <= 0.2)),
                "ttft_bias": float(np.mean(t)), "tpot_mape": float(np.mean(np.abs(p))),
                "tpot_within_20": float(np.mean(np.abs(p) <= 0.2)), "tpot_bias": float(np.mean(p))}

    def by_fold(self) -> dict[str, dict[str, float]]:
        groups: dict[str, list[HeldOut]] = defaultdict(list)
        for r in self.rows:
            groups[r.fold].append(r)
        return {k: self.score(v) for k, v in sorted(groups.items())}

    def format(self, markdown: bool = False) -> str:
        head = ["held out", "n", "TTFT MAPE", "TTFT ≤20%", "TTFT bias", "TPOT MAPE", "TPOT ≤20%", "TPOT bias"]
        lines = [(k, s) for k, s in self.by_fold().items()] + [("all (point-weighted)", self.score())]

        def cells(name: str, s: dict) -> list[str]:
            return [name, str(s["n"]), f"{s['ttft_mape']:.1%}", f"{s['ttft_within_20']:.0%}", f"{s['ttft_bias']:+.1%}",
                    f"{s['tpot_mape']:.1%}", f"{s['tpot_within_20']:.0%}", f"{s['tpot_bias']:+.1%}"]

        table = [head] + [cells(k, s) for k, s in lines]
        if markdown:
            out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            out += ["| " + " | ".join(r) + " |" for r in table[1:]]
            return "\n".join(out)
        widths = [max(len(r[i]) for r in table) for i in range(len(head))]
        return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                         for r in table)


def surrogate_prediction(cal: Calibration, s: PointSensitivity) -> tuple[float, float]:
    """(TTFT, TPOT) in ms the surrogate gives a point under the values ``cal`` resolves for it."""
    a, f = s.point.calibration_values(cal)
    return s.predict_resolved(a, f, DEFAULT_BASE)


#: Predictions of a fold's points under a calibration, in order: (TTFT, TPOT) in ms, or None for a
#: point that could not be predicted (a simulation that failed).
FoldPredictor = Callable[[Calibration, list[PointSensitivity]], list[tuple[float, float] | None]]


def surrogate_fold(cal: Calibration, points: list[PointSensitivity]) -> list[tuple[float, float] | None]:
    """:func:`surrogate_prediction` of every point of a fold."""
    return [surrogate_prediction(cal, s) for s in points]


def simulated_fold(processes: int = 1) -> FoldPredictor:
    """A fold predictor that simulates every point for real under the fold's calibration
    (``servesim validate``'s run of the points): the figure the surrogate approximates."""
    from servesim.validate.run import validate_points

    def predict(cal: Calibration, points: list[PointSensitivity]) -> list[tuple[float, float] | None]:
        rows = validate_points([s.point for s in points], cal, processes=processes)
        return [(r.pred_ttft, r.pred_tpot) if r.status == "ok" else None for r in rows]

    return predict


def cross_validate(sens: Sequence[PointSensitivity], kind: str,
                   fit: Callable[[list[PointSensitivity]], Calibration],
                   predict: FoldPredictor = surrogate_fold,
                   say: Callable[[str], None] = lambda m: None) -> CVResult:
    """Hold out each fold of ``kind`` in turn, ``fit`` the rest, score the fold with ``predict``
    (the surrogate by default; :func:`simulated_fold` simulates the held-out points for real).

    ``kind`` ``split`` fits the fit part (:func:`servesim.validate.points.in_fit_part`) and
    scores the held-out part only: the random split's figure.  A point ``predict`` cannot price
    is left out of the scores and counted in :attr:`CVResult.unpriced`.
    """
    ok = [s for s in sens if s.status == "ok" and math.isfinite(s.ttft_base) and math.isfinite(s.tpot_base)]
    folds: dict[str, list[PointSensitivity]] = defaultdict(list)
    for s in ok:
        folds[fold_of(s, kind)].append(s)
    held = ["holdout"] if kind == "split" else sorted(folds)
    result = CVResult(kind)
    for name in held:
        train = [s for k, v in folds.items() if k != name for s in v]
        cal = fit(train)
        _record(result, name, folds[name], predict(cal, folds[name]))
        sc = result.score([r for r in result.rows if r.fold == name])
        say(f"{kind} {name}: {len(train)} points fitted, {len(folds[name])} held out: "
            f"TTFT {sc['ttft_mape']:.1%}, TPOT {sc['tpot_mape']:.1%}")
    return result


def in_sample(sens: Sequence[PointSensitivity], fit: Callable[[list[PointSensitivity]], Calibration],
              predict: FoldPredictor = surrogate_fold) -> CVResult:
    """Every point scored by a fit on all points (the in-sample figure; the surrogate by default)."""
    ok = [s for s in sens if s.status == "ok" and math.isfinite(s.ttft_base) and math.isfinite(s.tpot_base)]
    cal = fit(ok)
    result = CVResult("in-sample")
    _record(result, "all", ok, predict(cal, ok))
    return result


def _record(result: CVResult, fold: str, points: Sequence[PointSensitivity],
            preds: Sequence[tuple[float, float] | None]) -> None:
    """Add ``points``' predictions to ``result`` as rows of ``fold``; a point without one
    (a simulation that failed) goes to :attr:`CVResult.unpriced`."""
    for s, pred in zip(points, preds, strict=True):
        if pred is None:
            result.unpriced.append(s.point.id)
            continue
        p = s.point
        result.rows.append(HeldOut(p.id, fold, f"{p.group}/{p.model}@{p.precision}", p.measured_ttft_ms,
                                   p.measured_tpot_ms, *pred))



def read_tables(path: str, points) -> list[PointSensitivity]:
    """Sensitivities from one table or a folder of tables (``chunk*.csv`` of
    benchmarks/measure_sensitivities.py); a point found in none keeps its "not in" status."""
    from pathlib import Path

    from servesim.validate.sensitivity import read_sensitivities

    p = Path(path)
    files = sorted(p.glob("*.csv")) if p.is_dir() else [p]
    merged: dict[str, PointSensitivity] = {}
    for f in files:
        for s in read_sensitivities(f, points):
            if s.point.id not in merged or (s.status == "ok" and merged[s.point.id].status != "ok"):
                merged[s.point.id] = s
    return [merged[p.id] for p in points if p.id in merged]


#: Share of held-out rows an error band covers (10th to 90th percentile of the signed error).
BAND_COVERAGE = 0.8
#: Residuals a group needs for a band of its own (else the band of all rows of that kind).
BAND_MIN_POINTS = 8
#: Which cross-validation scores which situation of a deployment (:func:`error_bands`).
BAND_BASIS = {"seen": "halves", "unseen_model": "family", "unseen_gpu": "gpu"}


def _band(rows: Sequence[HeldOut]) -> dict[str, float]:
    lo_q, hi_q = (1 - BAND_COVERAGE) / 2, 1 - (1 - BAND_COVERAGE) / 2
    t = np.array([r.ttft_err for r in rows])
    p = np.array([r.tpot_err for r in rows])
    return {"n": len(rows), "ttft_lo": float(np.quantile(t, lo_q)), "ttft_hi": float(np.quantile(t, hi_q)),
            "ttft_mape": float(np.mean(np.abs(t))), "tpot_lo": float(np.quantile(p, lo_q)),
            "tpot_hi": float(np.quantile(p, hi_q)), "tpot_mape": float(np.mean(np.abs(p)))}


def bands_of(result: CVResult, key: Callable[[HeldOut], str]) -> dict[str, dict[str, float]]:
    """Error bands of a cross-validation's held-out rows, per ``key`` (groups with at least
    :data:`BAND_MIN_POINTS` rows) and over all rows (``*``)."""
    groups: dict[str, list[HeldOut]] = defaultdict(list)
    for r in result.rows:
        groups[key(r)].append(r)
    out = {k: _band(v) for k, v in sorted(groups.items()) if len(v) >= BAND_MIN_POINTS}
    if result.rows:
        out["*"] = _band(result.rows)
    return out


def error_bands(sens: Sequence[PointSensitivity], fit: Callable[[list[PointSensitivity]], Calibration],
                say: Callable[[str], None] = lambda m: None) -> dict:
    """The ``intervals`` section of a calibration file: for each situation a deployment can be
    in, the spread of cross-validated relative errors of mean TTFT and TPOT.

    - ``seen``: model and GPU both calibrated: random halves (:data:`BAND_BASIS`), per ``<gpu>/<engine>``;
    - ``unseen_model``: the GPU/engine calibrated, the model family not: leave-one-family-out, per
      ``<gpu>/<engine>``;
    - ``unseen_gpu``: the GPU not calibrated: leave-one-GPU-out, per ``*/<engine>``.
    """
    def gpu_engine(r: HeldOut) -> str:
        return "/".join(r.group.split("/")[:2])

    def engine(r: HeldOut) -> str:
        return "*/" + r.group.split("/")[1]

    out: dict = {"coverage": BAND_COVERAGE, "basis": dict(BAND_BASIS)}
    for situation, kind in BAND_BASIS.items():
        res = cross_validate(sens, kind, fit, say=say)
        out[situation] = bands_of(res, engine if situation == "unseen_gpu" else gpu_engine)
    return out
