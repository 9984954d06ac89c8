"""The ``servesim sweep``, ``servesim recommend`` and ``servesim maxload`` subcommands."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from servesim.errors import ConfigError


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="YAML config with `slo` and `sweep` sections (default: the bundled example)")
    p.add_argument("--spec", help="a YAML file holding the sweep spec (a `sweep:` mapping or the spec itself)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a config value, e.g. --set slo.ttft_ms.p90=300 (repeatable)")
    p.add_argument("--out", help="output folder (overrides sweep.out); rerun into it to resume")
    p.add_argument("--executor", choices=("local", "ray"), help="where candidates run (overrides sweep.executor.kind)")
    p.add_argument("--jobs", type=int, help="candidates in parallel (overrides sweep.executor.jobs)")
    p.add_argument("--ray-address", help="Ray cluster address (overrides sweep.executor.address)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")


def add_subcommands(sub) -> None:
    p = sub.add_parser("sweep", help="simulate many deployments (grid, random, TPE, NSGA-II) into one table")
    _common(p)
    p.set_defaults(handler=cmd_sweep)
    p = sub.add_parser("recommend", help="the cheapest deployment meeting the SLO, Pareto fronts, launch flags")
    _common(p)
    p.add_argument("--from", dest="from_dir", help="a finished sweep's folder: recommend from it without simulating")
    p.add_argument("--by", choices=("cost", "gpus"), help="cheapest per hour, or fewest GPUs (overrides sweep.choose)")
    p.set_defaults(handler=cmd_recommend)
    p = sub.add_parser("maxload", help="highest load (rate, speed-up or concurrency) that still meets the SLO target")
    p.add_argument("config", nargs="?", help="YAML config with an `slo` section")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE")
    p.add_argument("--knob", help="config key of the load (default: by workload kind: workload.arrival.rate, "
                                  "workload.speedup, workload.concurrency)")
    p.add_argument("--tol", type=float, default=0.02, help="relative width of the final bracket (default 0.02)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(handler=cmd_maxload)


def _spec_from(args) -> dict | None:
    if not args.spec:
        return None
    from servesim.config.load import read_yaml

    data = read_yaml(Path(args.spec))
    return data.get("sweep", data)


def _executor(args, spec):
    ex = spec.executor
    update = {k: v for k, v in (("kind", args.executor), ("jobs", args.jobs), ("address", args.ray_address))
              if v is not None}
    return ex.model_copy(update=update) if update else ex


class _Bar:
    """A progress bar with ETA over candidates, on stderr when it is a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self._bar = self._task = None

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self._bar = Progress(TextColumn("candidates"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("ETA"), TimeRemainingColumn(), console=Console(stderr=True), transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task("sweep", total=None)
        return self

    def __call__(self, done: int, total: int | None) -> None:
        if self._bar is not None:
            if total is not None:
                self._bar.update(self._task, total=total, completed=done)
            else:
                self._bar.update(self._task, completed=done)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)


def _run(args):
    from servesim.config import load_config
    from servesim.plan.sweep import run_sweep, sweep_spec

    cfg = load_config(args.config, args.overrides)
    spec = sweep_spec(cfg, _spec_from(args), source=str(args.spec))
    with _Bar(not args.quiet) as bar:
        return run_sweep(cfg, spec=spec, out=args.out or "", executor=_executor(args, spec), progress=bar)


def _console():
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=160)  # pipes and files: room for every column


def _fmt(v, digits=1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{v:,.{digits}f}" if isinstance(v, float) else str(v)


def _print_rows(console, rows, keys, title) -> None:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col in ["id", *keys, "status", "GPUs", "tok/s/GPU", "tok/s/user", "SLO %", "$/h", "$/Mtok", "front"]:
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r["candidate"]), *(json.dumps(r["params"].get(k)) for k in keys), r["status"],
                  _fmt(r.get("gpus")), _fmt(r.get("throughput_per_gpu_tok_s")), _fmt(r.get("per_user_tok_s")),
                  _fmt((r.get("slo_attainment") or math.nan) * 100), _fmt(r.get("cost_per_hour_usd"), 2),
                  _fmt(r.get("cost_per_mtok_usd"), 3), "*" if r.get("pareto") else "")
    console.print(t)


def _report(result, console, limit: int = 40) -> None:
    from servesim.plan.sweep import counts

    keys = list(result.spec.parameters)
    c = counts(result.rows)
    console.print(f"{c['candidates']} candidates: {c['ok']} ran, {c['infeasible']} infeasible, {c['failed']} failed "
                  f"({result.ran} simulated now, {result.wall_s:.1f} s)")
    shown = result.rows if len(result.rows) <= limit else [r for r in result.rows if r.get("pareto")]
    _print_rows(console, shown, keys, "Candidates" if len(result.rows) <= limit else "Pareto front (throughput per GPU vs per user)")
    for r in result.rows:
        if r["status"] != "ok" and len(result.rows) <= limit:
            console.print(f"  candidate {r['candidate']} {r['status']}: {r['reason']}")
    ch = result.chosen
    if ch is None:
        console.print("[bold red]No candidate meets the SLA[/]" + (" within the GPU budget" if result.spec.gpu_budget else ""))
    else:
        console.print(f"[bold]Chosen[/] (candidate {ch['candidate']}): {json.dumps(ch['params'])}: {ch['gpus']} GPUs, "
                      f"${_fmt(ch.get('cost_per_hour_usd'), 2)}/h, SLO {_fmt(ch.get('slo_attainment', math.nan) * 100)}%")
    if result.out_dir is not None:
        console.print(f"Wrote {result.out_dir / 'candidates.parquet'}, sweep.json")


def cmd_sweep(args) -> int:
    from rich.console import Console

    result = _run(args)
    _report(result, _console())
    return 0


def _from_dir(args):
    """A finished sweep's result read back from its folder (no simulation)."""
    from servesim.plan.pareto import COST_FRONT, THROUGHPUT_FRONT, choose, pareto_front
    from servesim.plan.results import SWEEP_JSON, read_journal
    from servesim.plan.spec import SweepSpec
    from servesim.plan.sweep import SweepResult

    d = Path(args.from_dir)
    if not (d / SWEEP_JSON).exists():
        raise ConfigError(f"--from: {d} holds no sweep.json (not a `servesim sweep` output folder)")
    doc = json.loads((d / SWEEP_JSON).read_text())
    spec = SweepSpec.model_validate(doc["spec"])
    rows = sorted(read_journal(d), key=lambda r: r["candidate"])
    for r, p, c in zip(rows, pareto_front(rows, THROUGHPUT_FRONT), pareto_front(rows, COST_FRONT)):
        r["pareto"], r["pareto_cost"] = p, c
    return SweepResult(spec=spec, rows=rows, chosen=None, out_dir=d, base=doc["base_config"])


def cmd_recommend(args) -> int:
    from rich.console import Console

    from servesim.plan.launch_flags import launch_files
    from servesim.plan.pareto import choose
    from servesim.plan.results import write_json_atomic
    from servesim.plan.sweep import chosen_config, chosen_doc

    result = _from_dir(args) if args.from_dir else _run(args)
    by = args.by or result.spec.choose
    result.spec = result.spec.model_copy(update={"choose": by})
    result.chosen = choose(result.rows, by, result.spec.require_slo)
    console = _console()
    _report(result, console)
    front_cost = [r for r in result.rows if r.get("pareto_cost")]
    if front_cost:
        console.print("Pareto front of per-user tokens/s vs $/Mtoken: candidates "
                      + ", ".join(str(r["candidate"]) for r in front_cost))
    out = Path(args.out) if args.out else (result.out_dir or Path("servesim-recommend"))
    out.mkdir(parents=True, exist_ok=True)
    doc = {"by": by, "chosen": chosen_doc(result),
           "pareto_throughput_vs_per_user": [r["candidate"] for r in result.rows if r.get("pareto")],
           "pareto_per_user_vs_cost": [r["candidate"] for r in front_cost]}
    write_json_atomic(doc, out / "recommendation.json")
    if result.chosen is not None:
        files = launch_files(chosen_config(result), out)
        console.print("Launch commands: " + ", ".join(str(f) for f in files))
    console.print(f"Wrote {out / 'recommendation.json'}")
    return 0 if result.chosen is not None else 1


def cmd_maxload(args) -> int:
    from rich.console import Console

    from servesim.plan.maxload import find_max_load

    console = Console(stderr=args.format == "json")

    def show(ev: dict) -> None:
        console.print(f"  load {ev['load']:.4g}: {ev['attainment'] * 100:.1f}% meet the SLO"
                      f"{', overloaded' if ev['overloaded'] else ''} -> {'pass' if ev['passes'] else 'fail'}")

    res = find_max_load(args.config, args.overrides, knob=args.knob, rel_tol=args.tol, progress=show)
    if args.format == "json":
        print(json.dumps(res.to_json(), indent=2))
    elif res.max_load is None:
        console.print(f"[bold red]No load of {res.knob} tried meets the SLO target {res.target:.0%}[/]")
    else:
        console.print(f"[bold]Maximum sustainable {res.knob}: {res.max_load:.4g}[/] "
                      f"(fails at {res.first_failing:.4g}; target {res.target:.0%} of requests meeting the SLO; "
                      f"{len(res.evaluations)} runs)")
    return 0 if res.max_load is not None else 1
