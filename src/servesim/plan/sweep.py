"""``servesim sweep``: run a search over config keys and write the candidates table.

Flow: the config's ``sweep`` section (or a given spec) -> candidates (search.py) -> each
checked for feasibility here, before any simulation (candidate.check) -> feasible ones run on
an executor (executors.py) -> each finished row appended to the journal at once (results.py)
-> candidates.parquet with the Pareto fronts and sweep.json with the chosen deployment.
Rerunning the same sweep into the same folder skips every candidate already in the journal.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from servesim.config import Config, load_config
from servesim.config.load import config_base_dir
from servesim.errors import ConfigError
from servesim.plan.candidate import check, params_key
from servesim.plan.executors import make_executor
from servesim.plan.pareto import COST_FRONT, THROUGHPUT_FRONT, choose, pareto_front
from servesim.plan.results import (SWEEP_JSON, TABLE, Journal, check_resumable, read_journal,
                                   write_json_atomic, write_table)
from servesim.plan.search import OptunaSearch, grid_candidates, random_candidates
from servesim.plan.spec import ExecutorConfig, SweepSpec


@dataclass
class SweepResult:
    spec: SweepSpec
    rows: list[dict]
    chosen: dict | None
    out_dir: Path | None
    base: dict = field(default_factory=dict)
    wall_s: float = 0.0
    ran: int = 0  # candidates simulated by this call (not resumed from the journal)


class _Context:
    """What every candidate of one sweep shares, and the bookkeeping of finished rows."""

    def __init__(self, base: dict, base_dir: str | None, spec: SweepSpec, out_dir: Path | None,
                 progress: Callable[[int, int | None], None] | None) -> None:
        self.base, self.base_dir, self.spec = base, base_dir, spec
        self.rows: dict[str, dict] = {}
        self.journal = Journal(out_dir) if out_dir is not None else None
        self.progress = progress
        self.ran = 0

    def task(self, cid: int, params: dict) -> dict:
        return {"candidate": cid, "params": params, "base": self.base, "base_dir": self.base_dir,
                "gpu_budget": self.spec.gpu_budget, "fill_budget": self.spec.fill_budget}

    def precheck(self, cid: int, params: dict) -> dict | None:
        """The infeasible row of a candidate that cannot run (journaled), else None."""
        _cfg, gpus, reason, _extra = check(self.base, self.base_dir, params, self.spec.gpu_budget,
                                           self.spec.fill_budget)
        if reason is None:
            return None
        row = {"candidate": cid, "params": params, "status": "infeasible", "reason": reason, "gpus": gpus}
        self.record(row)
        return row

    def record(self, row: dict) -> None:
        self.rows[params_key(row["params"])] = row
        if row["status"] != "infeasible":
            self.ran += 1
        if self.journal is not None:
            self.journal.append(row)
        if self.progress is not None:
            self.progress(len(self.rows), None)


def _resume_key(spec: SweepSpec, base: dict) -> str:
    doc = spec.model_dump(mode="json", exclude={"executor", "out"})
    return hashlib.sha256(json.dumps([doc, base], sort_keys=True).encode()).hexdigest()[:16]


def _run_list(ctx: _Context, candidates: list[dict], executor) -> None:
    todo = []
    for cid, params in enumerate(candidates):
        if params_key(params) in ctx.rows:
            continue
        if ctx.precheck(cid, params) is None:
            todo.append(ctx.task(cid, params))
    for row in executor.map(todo):
        ctx.record(row)


def _run_optuna(ctx: _Context, executor) -> None:
    search = OptunaSearch(ctx.spec)
    for row in sorted(ctx.rows.values(), key=lambda r: r["candidate"]):
        search.replay(row["params"], row)
    trials = ctx.spec.trials or 20
    asked = len(ctx.rows)
    next_id = max((r["candidate"] for r in ctx.rows.values()), default=-1) + 1
    while asked < trials:
        batch = []
        for _ in range(min(executor.jobs, trials - asked)):
            trial, params = search.ask()
            asked += 1
            known = ctx.rows.get(params_key(params))
            if known is not None:  # the sampler proposed a finished candidate again
                search.tell(trial, known)
                continue
            if any(params_key(p) == params_key(params) for _, p, _ in batch):
                batch.append((trial, params, None))
                continue
            row = ctx.precheck(next_id, params)
            if row is not None:
                search.tell(trial, row)
                next_id += 1
                continue
            batch.append((trial, params, next_id))
            next_id += 1
        tasks = [ctx.task(cid, p) for _, p, cid in batch if cid is not None]
        for row in executor.map(tasks):
            ctx.record(row)
        for trial, params, _ in batch:
            search.tell(trial, ctx.rows[params_key(params)])


def sweep_spec(cfg: Config, spec: SweepSpec | dict | None, source: str = "<spec>") -> SweepSpec:
    """The sweep to run (``spec``, else the config's section), checked against the config."""
    if spec is None:
        if cfg.sweep is None:
            raise ConfigError("sweep: the config has no `sweep` section (or give a spec file with --spec)")
        spec = cfg.sweep
    if isinstance(spec, dict):
        from pydantic import ValidationError

        from servesim.config.load import format_validation_error

        try:
            spec = SweepSpec.model_validate(spec)
        except ValidationError as err:
            text = format_validation_error(err, source).replace("\n  ", "\n  sweep.").replace("sweep.<root>: ", "sweep: ")
            raise ConfigError(text) from None
    if spec.require_slo and cfg.slo is None:
        raise ConfigError("sweep.require_slo: the config has no `slo` section to meet; add one "
                          "(e.g. slo: {ttft_ms: {p90: 500}}) or set sweep.require_slo: false")
    return spec


def run_sweep(config: Config | dict | str | Path | None, overrides: list[str] | None = None,
              spec: SweepSpec | dict | None = None, out: str | Path | None = "",
              executor: ExecutorConfig | None = None,
              progress: Callable[[int, int | None], None] | None = None) -> SweepResult:
    """Run (or resume) a sweep.  ``out=""``: the spec's ``out``; ``None``: write nothing."""
    t0 = time.perf_counter()
    cfg = load_config(config, overrides)
    spec = sweep_spec(cfg, spec)
    # Only what the user set: a candidate that changes the engine must not inherit the other
    # engine's defaults (they would be unknown keys of the new one).
    base = cfg.model_dump(mode="json", exclude_unset=True)
    base.pop("sweep", None)
    base_dir = config_base_dir(cfg)
    out_dir = Path(spec.out) if out == "" and spec.out else (Path(out) if out else None)
    resume_key = _resume_key(spec, base)
    doc: dict[str, Any] = {"resume_key": resume_key, "spec": spec.model_dump(mode="json"), "base_config": base,
                           "status": "running"}
    prior: list[dict] = []
    if out_dir is not None:
        if out_dir.exists() and not out_dir.is_dir():
            raise ConfigError(f"sweep.out: {out_dir} is a file, expected a folder")
        out_dir.mkdir(parents=True, exist_ok=True)
        check_resumable(out_dir, doc)
        prior = read_journal(out_dir)
        write_json_atomic(doc, out_dir / SWEEP_JSON)
    ctx = _Context(base, str(base_dir) if base_dir is not None else None, spec, out_dir, progress)
    for row in prior:
        ctx.rows[params_key(row["params"])] = row
    ex = make_executor(executor or spec.executor)
    try:
        if spec.search in ("grid", "random"):
            cands = grid_candidates(spec) if spec.search == "grid" else random_candidates(spec)
            if progress is not None:
                progress(len(ctx.rows), len(cands))
            _run_list(ctx, cands, ex)
        else:
            if progress is not None:
                progress(len(ctx.rows), spec.trials or 20)
            _run_optuna(ctx, ex)
    finally:
        ex.close()
        if ctx.journal is not None:
            ctx.journal.close()
    rows = sorted(ctx.rows.values(), key=lambda r: r["candidate"])
    front = pareto_front(rows, THROUGHPUT_FRONT)
    cost_front = pareto_front(rows, COST_FRONT)
    for r, p, c in zip(rows, front, cost_front):
        r["pareto"], r["pareto_cost"] = p, c
    chosen = choose(rows, spec.choose, spec.require_slo)
    result = SweepResult(spec=spec, rows=rows, chosen=chosen, out_dir=out_dir, base=base,
                         wall_s=time.perf_counter() - t0, ran=ctx.ran)
    if out_dir is not None:
        write_table(rows, out_dir / TABLE, list(spec.parameters), front, cost_front)
        doc.update(status="done", counts=counts(rows), chosen=chosen_doc(result))
        write_json_atomic(doc, out_dir / SWEEP_JSON)
    return result


def counts(rows: list[dict]) -> dict[str, int]:
    out = {"candidates": len(rows)}
    for s in ("ok", "infeasible", "failed"):
        out[s] = sum(r["status"] == s for r in rows)
    return out


def chosen_config(result: SweepResult) -> dict | None:
    """The full config of the chosen candidate (the base with its parameters set)."""
    if result.chosen is None:
        return None
    from servesim.plan.candidate import candidate_overrides

    params = {**result.chosen["params"], **result.chosen.get("set", {})}
    cfg = load_config(result.base, candidate_overrides(params))
    return cfg.model_dump(mode="json", exclude={"sweep"})


def chosen_doc(result: SweepResult) -> dict | None:
    """sweep.json's ``chosen``: why (rule), the candidate's row and its whole config."""
    if result.chosen is None:
        return {"candidate": None, "rule": _rule(result.spec),
                "note": "no candidate meets the SLA" + (" within the GPU budget" if result.spec.gpu_budget else "")}
    return {"candidate": result.chosen["candidate"], "rule": _rule(result.spec), "params": result.chosen["params"],
            "metrics": {k: v for k, v in result.chosen.items() if k not in ("params", "candidate")},
            "config": chosen_config(result)}


def _rule(spec: SweepSpec) -> str:
    what = "lowest $/hour" if spec.choose == "cost" else "fewest GPUs"
    return f"{what} among candidates {'meeting the SLO and ' if spec.require_slo else ''}not overloaded"
