"""Maximum sustainable load: the highest arrival rate, trace speed-up or concurrency at which a
deployment still meets its SLO target, by bracketing and bisection on the simulator.

A load *passes* when the share of requests meeting every SLO objective is at least
``slo.target`` and the run is not overloaded (plan/overload.py).  The search assumes that
passing is monotone in the load (more load never helps), which holds for queueing systems up
to the noise of one seeded run: every run keeps the config's seed, so the same requests are
replayed at each load (a synthetic workload scales the same draws).  Bracketing doubles (or
halves) the load from its configured value until the outcome flips; bisection then narrows
the bracket until it is within ``rel_tol`` of its upper end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from servesim.config import Config, load_config
from servesim.errors import ConfigError

#: Workload kind -> the config key its load is set by, and whether it is whole numbers.
KNOBS = {"synthetic": ("workload.arrival.rate", False), "trace": ("workload.speedup", False),
         "closed_loop": ("workload.concurrency", True)}


@dataclass
class MaxLoadResult:
    knob: str
    max_load: float | None  # None: even the smallest load tried fails
    first_failing: float | None  # None: never failed up to the run limit
    target: float
    evaluations: list[dict] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"knob": self.knob, "max_load": self.max_load, "first_failing": self.first_failing,
                "target": self.target, "evaluations": self.evaluations}


def _get(data: dict, dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def evaluate_load(cfg: Config, knob: str, value: float) -> dict:
    """One run at ``value``: attainment, overload, pass/fail."""
    from servesim.api import predict

    pred = predict(cfg, [f"{knob}={value}", "output.timeseries=false", "output.kv_events=false"])
    s = pred.summary
    slo = s["slo"]
    overloaded = bool(s["overload"]["overloaded"])
    return {"load": value, "attainment": slo["attainment_all"], "overloaded": overloaded,
            "goodput_rps": slo["goodput_request_per_s"],
            "passes": bool(slo["attainment_all"] >= slo["target"] - 1e-12 and not overloaded)}


def find_max_load(config: Config | dict | str | None, overrides: list[str] | None = None, knob: str | None = None,
                  rel_tol: float = 0.02, max_runs: int = 40,
                  progress: Callable[[dict], None] | None = None) -> MaxLoadResult:
    """Bracket and bisect the load knob (default: the workload kind's, see ``KNOBS``)."""
    cfg = load_config(config, overrides)
    if cfg.slo is None:
        raise ConfigError("max load: the config has no `slo` section (e.g. slo: {ttft_ms: {p90: 500}})")
    integer = False
    if knob is None:
        knob, integer = KNOBS[cfg.workload.kind]
    start = _get(cfg.model_dump(mode="json"), knob)
    if not isinstance(start, (int, float)) or isinstance(start, bool) or start <= 0:
        raise ConfigError(f"max load: {knob} must be a positive number in the config (got {start!r})")
    integer = integer or isinstance(start, int)
    result = MaxLoadResult(knob=knob, max_load=None, first_failing=None, target=cfg.slo.target)

    def run(x: float) -> bool:
        if len(result.evaluations) >= max_runs:
            raise ConfigError(f"max load: no answer within {max_runs} runs (last bracket "
                              f"{result.max_load}..{result.first_failing})")
        ev = evaluate_load(cfg, knob, int(x) if integer else x)
        result.evaluations.append(ev)
        if progress is not None:
            progress(ev)
        return ev["passes"]

    lo = hi = None
    x = float(start)
    if run(x):
        lo = x
        while hi is None:
            x = x * 2
            if run(x):
                lo = x
            else:
                hi = x
    else:
        hi = x
        while lo is None:
            x = x / 2 if not integer else float(int(x) // 2)
            if x < (1 if integer else start * 1e-4):
                return result
            if run(x):
                lo = x
            else:
                hi = x
    while (hi - lo > 1) if integer else (hi - lo > rel_tol * hi):
        mid = float((int(lo) + int(hi)) // 2) if integer else (lo + hi) / 2
        if run(mid):
            lo = mid
        else:
            hi = mid
    result.max_load = int(lo) if integer else lo
    result.first_failing = int(hi) if integer else hi
    return result
