"""The planning blocks of a run's summary: ``slo``, ``overload``, ``cost`` and ``energy``.

Called by ``servesim.predict`` after the run; every sweep candidate is summarised the same way.
"""

from __future__ import annotations

from typing import Any

from servesim.metrics.recorder import RequestRecorder, Status
from servesim.plan.cost import cost_summary
from servesim.plan.energy import energy_summary
from servesim.plan.fleet import fleet_pools, pool_gpus
from servesim.plan.overload import overload_check, saturation_check
from servesim.plan.slo import slo_summary


def planning_summary(cfg, rec: RequestRecorder, deployment, workers: list, sim_end: float,
                     summary: dict) -> dict[str, Any]:
    """{"slo": ... (only with an ``slo`` section), "overload", "cost", "energy"}."""
    out: dict[str, Any] = {}
    total_gpus = summary["total_gpus"]
    if cfg.slo is not None:
        out["slo"] = slo_summary(rec, cfg.slo, total_gpus)
    out["overload"] = overload_check(rec, closed_loop=cfg.workload.kind == "closed_loop")
    out["overload"].update(saturation_check(rec))
    done = rec.column("status") == Status.COMPLETED
    measured_done = done & ~rec.is_warmup
    span = summary["throughput"]["duration_s"]
    out["cost"] = cost_summary(pool_gpus(deployment), cfg.cost, span,
                               int(rec.column("input_length")[measured_done].sum()),
                               int(rec.column("generated")[measured_done].sum()))
    out["energy"] = energy_summary(fleet_pools(deployment, workers), cfg.cost, sim_end,
                                   int(rec.column("input_length")[done].sum()),
                                   int(rec.column("generated")[done].sum()))
    return out
