"""Which candidates a sweep tries: the full grid, a seeded random sample, or Optuna's
model-based samplers (TPE for one objective, NSGA-II for several) asked and told in batches.

Grid and random candidates are a fixed list (the same seed gives the same list), so a resumed
sweep continues the same list.  Optuna's samplers are seeded too; a resumed model-based sweep
first tells the study every candidate already in the journal, then asks for the rest.
"""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import numpy as np

from servesim.errors import ConfigError
from servesim.plan.spec import RangeParam, SweepSpec

#: Objective value told to Optuna for a candidate with no metric (infeasible, failed, NaN).
_WORST = 1e18


def grid_candidates(spec: SweepSpec) -> list[dict[str, Any]]:
    """Every combination, the first parameter varying slowest."""
    keys = list(spec.parameters)
    axes = [spec.choices(k) for k in keys]
    return [dict(zip(keys, combo)) for combo in itertools.product(*axes)]


def _sample(p, rng: np.random.Generator) -> Any:
    if isinstance(p, RangeParam):
        if p.step is not None:
            vals = p.grid()
            return vals[int(rng.integers(len(vals)))]
        x = math.exp(rng.uniform(math.log(p.low), math.log(p.high))) if p.log else rng.uniform(p.low, p.high)
        return int(round(x)) if p.integer else float(x)
    values = p if isinstance(p, list) else p.values
    return values[int(rng.integers(len(values)))]


def random_candidates(spec: SweepSpec) -> list[dict[str, Any]]:
    """``trials`` distinct candidates drawn with ``seed`` (fewer when the space is smaller)."""
    rng = np.random.default_rng(spec.seed)
    want = spec.trials or 20
    seen: set[str] = set()
    out = []
    for _ in range(want * 50):
        cand = {k: _sample(p, rng) for k, p in spec.parameters.items()}
        key = json.dumps(cand, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(cand)
            if len(out) == want:
                break
    return out


def _label(v: Any) -> Any:
    """Optuna's categorical choices must be None/bool/int/float/str: others go as JSON text."""
    return v if v is None or isinstance(v, (bool, int, float, str)) else json.dumps(v, sort_keys=True)


class OptunaSearch:
    """Ask/tell over Optuna (>= 5: ``Trial.set_constraint``): objectives from ``spec.objective_list()``,
    the SLO as a constraint (a candidate is feasible when its shortfall is <= 0)."""

    def __init__(self, spec: SweepSpec) -> None:
        try:
            import optuna
        except ImportError:
            raise ConfigError(f"sweep.search: {spec.search} needs the optional extra: "
                              "pip install 'servesim[plan]'") from None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.spec = spec
        self.objectives = spec.objective_list()
        if spec.search == "tpe":
            self.objectives = self.objectives[:1]
            sampler = optuna.samplers.TPESampler(seed=spec.seed,
                                                 n_startup_trials=min(5, max(1, (spec.trials or 20) // 4)))
        else:
            sampler = optuna.samplers.NSGAIISampler(seed=spec.seed,
                                                    population_size=max(4, min(20, (spec.trials or 20) // 3)))
        self.study = optuna.create_study(directions=[("maximize" if d == "max" else "minimize")
                                                     for _, d in self.objectives], sampler=sampler)
        self._values: dict[str, list] = {}
        self.distributions = self._distributions()

    def _distributions(self) -> dict[str, Any]:
        d = self.optuna.distributions
        out = {}
        for key, p in self.spec.parameters.items():
            if isinstance(p, RangeParam) and p.step is None:
                out[key] = (d.IntDistribution(int(p.low), int(p.high), log=p.log) if p.integer
                            else d.FloatDistribution(p.low, p.high, log=p.log))
            else:
                values = self.spec.choices(key)
                labels = [_label(v) for v in values]
                self._values[key] = dict(zip(labels, values))
                out[key] = d.CategoricalDistribution(labels)
        return out

    def ask(self) -> tuple[Any, dict[str, Any]]:
        trial = self.study.ask(self.distributions)
        params = {k: self._values[k][v] if k in self._values else v for k, v in trial.params.items()}
        return trial, params

    def _score(self, row: dict) -> tuple[list[float], float]:
        values = []
        for metric, direction in self.objectives:
            v = row.get(metric)
            bad = v is None or (isinstance(v, float) and math.isnan(v)) or row["status"] != "ok"
            values.append((-_WORST if direction == "max" else _WORST) if bad else float(v))
        if row["status"] != "ok":
            violation = 1e3
        elif self.spec.require_slo:
            violation = float(row.get("slo_violation", 0.0))
        else:
            violation = 1.0 if row.get("overloaded") else 0.0
        return values, violation

    def tell(self, trial, row: dict) -> None:
        values, violation = self._score(row)
        trial.set_constraint("slo", violation)  # feasible when <= 0 (the SLO met, or no failure)
        self.study.tell(trial, values)

    def replay(self, params: dict[str, Any], row: dict) -> None:
        """Tell the study a candidate finished before (a resumed sweep)."""
        values, violation = self._score(row)
        labels = {k: _label(v) if k in self._values else v for k, v in params.items()}
        trial = self.optuna.trial.create_trial(params=labels, distributions=self.distributions, values=values,
                                               constraints={"slo": violation})
        self.study.add_trial(trial)
