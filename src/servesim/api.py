"""``servesim.predict``: run one simulation from a config and return its results.

This is the library entry point that the CLI, notebooks and other tools share.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

import servesim
from servesim.cluster.deployment import Deployment, build_deployment
from servesim.config import Config, load_config
from servesim.config.load import config_base_dir
from servesim.kvcache.policies import NextUseOracle
from servesim.metrics.recorder import RequestRecorder
from servesim.metrics.summary import fleet_summary, summarize, worker_breakdown
from servesim.metrics.timeseries import TimeSeries
from servesim.metrics.warnings import input_warnings
from servesim.errors import WorkloadError
from servesim.gc_threshold import fewer_collections
from servesim.plan.summary import planning_summary
from servesim.metrics.utilisation import annotate_workers
from servesim.report.advice import run_alerts
from servesim.report.kv_events import KVEventLog
from servesim.sim.simulation import RunStats, Simulation
from servesim.workload.sharing import shared_block_ids
from servesim.workload.source import WorkloadSource, build_source


@dataclass
class Prediction:
    """Everything one run produced: the summary, per-request columns and time series."""

    config: Config
    summary: dict
    recorder: RequestRecorder
    timeseries: TimeSeries | None
    stats: RunStats
    deployment: Deployment
    workload: str
    #: The simulator's own cost (wall seconds); kept out of prediction.json so that
    #: identical runs write identical files.
    host: dict = field(default_factory=dict)
    #: An agentic run's plays, one entry per play run in each column (metrics/plays.py), else None.
    plays: dict | None = None

    def header(self) -> dict:
        """The console's title line; a disaggregated deployment shows its two pools (the
        deployment's own ``tp`` and ``workers`` do not apply to it)."""
        d = self.config.deployment
        head: dict = {"model": d.model, "gpu": d.gpu, "engine": d.engine.name}
        dis = d.disaggregation
        if dis is None:
            head.update(tp=d.tp, workers=d.workers)
        else:
            for name, pool in (("prefill", dis.prefill), ("decode", dis.decode)):
                tp = pool.tp if pool.tp is not None else d.tp
                dp = pool.attention_dp if pool.attention_dp is not None else d.attention_dp
                own = [x for x in (pool.gpu, pool.engine.name if pool.engine else None) if x]
                head[name] = (f"{pool.workers} × tp {tp}" + (f" × dp {dp}" if dp > 1 else "")
                              + (f" ({', '.join(own)})" if own else ""))
        head["workload"] = self.workload
        head["client"] = self.config.client
        return head

    def to_json(self) -> dict:
        """prediction.json's content: summary, resolved config and versions.  ``complete``:
        the file belongs to a finished run whose every output file was written with it."""
        return {
            "complete": True,
            "summary": self.summary,
            "deployment_resolved": self.deployment.describe(),
            "workload": self.workload,
            "config": self.config.model_dump(mode="json"),
            "versions": {
                "servesim": servesim.__version__,
                "python": platform.python_version(),
                "numpy": np.__version__,
            },
        }

    def write(self, out_dir: str | Path | None = None,
              also: Callable[[Path], object] | None = None) -> Path:
        """Write prediction.json, requests.parquet and timeseries.parquet as one set; returns the folder.

        The files are written into a temporary folder beside ``out_dir`` and moved into place
        together once complete (:class:`~servesim.report.files.OutputSet`): an error or an
        interrupt on the way leaves the folder's previous contents untouched.  ``also(folder)``
        writes more files into the set before it is moved (the CLI's figures).
        """
        from servesim.report.files import OutputSet, write_json, write_parquet, write_requests

        cfg = self.config.output
        out = Path(out_dir if out_dir is not None else cfg.dir or "servesim-out")
        with OutputSet(out) as outputs:
            tmp = outputs.path
            agentic = self.stats.agentic
            if cfg.requests:
                more = agentic.request_columns(self.recorder.size) if agentic is not None else None
                write_requests(self.recorder, tmp / "requests.parquet", more=more)
            if agentic is not None:
                from servesim.report.arrow import table

                write_parquet(table(_arrow_ready(self.plays)), tmp / "plays.parquet")
            if cfg.timeseries and self.timeseries is not None:
                from servesim.report.arrow import table

                write_parquet(table(self.timeseries.columns()), tmp / "timeseries.parquet")
            if self.stats.kv_events is not None:
                self.stats.kv_events.write(tmp / "kv_events.jsonl")
            write_json(self.to_json(), tmp / "prediction.json")  # last: it vouches for the rest
            if also is not None:
                also(tmp)
            return outputs.commit()


def next_use_oracle(source: WorkloadSource) -> NextUseOracle:
    """Future block uses for the offline ``belady`` eviction policy, from a second pass over the workload.

    Later session turns have no arrival time until the run decides it; they are placed at
    their previous turn's arrival plus the think time (an early estimate).
    """
    estimated: dict[int, float] = {}
    items = []
    for req in source.requests():
        t = req.arrival
        if req.after is not None:
            t = estimated.get(req.after, 0.0) + req.delay
        estimated[req.index] = t
        items.append((t, [(bid, 0) for bid in req.hash_ids]))
    return NextUseOracle(items)


def run_simulation(cfg: Config, source: WorkloadSource, deployment: Deployment,
                   progress: Callable[[int, float], None] | None = None) -> tuple[RequestRecorder, TimeSeries | None, RunStats]:
    """Drive ``source`` through ``deployment``; the building block of predict and validate.

    The deployment's frontend (API server, tokenizer queue, stream latency; from
    ``perf.calibration`` and ``perf.frontend``) sits between the client and the router; its
    scheduler CPU time is already in ``deployment.step_time``.  The stream latency is applied
    to the recorded token times before this returns.
    """
    recorder = RequestRecorder()
    frontend = deployment.make_frontend()
    ts = TimeSeries(cfg.output.timeseries_interval_s) if cfg.output.timeseries else None
    kv_log = KVEventLog() if cfg.output.kv_events else None
    workers = deployment.make_workers(recorder, fast_forward=cfg.simulation.mode == "fast", kv_event_log=kv_log)
    sharing = [w.engine for w in workers if w.engine.wants_shared_block_ids()]
    if source.agentic is not None and source.agentic.recycles:
        sharing = []  # recycled plays use block ids the workload does not list: every block is registered
    if sharing:  # one pass over the workload, for the engines that index only shared blocks
        shared = shared_block_ids(source)
        for engine in sharing:
            engine.use_shared_block_ids(shared)
    sim = Simulation(
        requests=source.requests(),
        mode=source.mode,
        concurrency=source.concurrency,
        workers=workers,
        router=deployment.make_router(cfg.seed),
        recorder=recorder,
        timeseries=ts,
        max_sim_time=cfg.simulation.max_sim_time_s,
        progress=progress,
        frontend=frontend,
        disagg=getattr(deployment, "coordinator", None),  # set by a disaggregated deployment
        in_flight=deployment.oracle,
    )
    driver = None
    if source.agentic is not None:  # the agentic driver sends the graph's nodes (sim/agentic.py)
        from servesim.sim.agentic import driver_for

        driver = driver_for(source.agentic, cfg.seed)
        driver.attach(sim)
    with fewer_collections():  # the run allocates many short-lived containers (gc_threshold.py)
        stats = sim.run()
    if driver is not None:
        driver.finish(stats.sim_end)
        stats.agentic = driver
    delay = getattr(cfg.deployment.engine, "first_chunk_delay_iters", 0)
    if delay and cfg.deployment.disaggregation is None:  # the engine streams in chunks (engines/streaming.py)
        from servesim.engines.streaming import delay_first_chunk

        delay_first_chunk(recorder, delay)
    if frontend is not None:
        frontend.apply_stream_latency(recorder)
    stats.workers = workers
    stats.kv_events = kv_log
    return recorder, ts, stats


def _uses_belady(cfg: Config) -> bool:
    """Whether any engine of the deployment (a disaggregated pool's included) evicts by ``belady``,
    which needs the workload's future block uses."""
    dep = cfg.deployment
    engines = [dep.engine]
    if dep.disaggregation is not None:
        engines += [p.engine for p in (dep.disaggregation.prefill, dep.disaggregation.decode) if p.engine is not None]
    return any(e.eviction_policy == "belady" for e in engines)


def _deployment_notes(cfg: Config, deployment: Deployment) -> list[str]:
    """Accepted but noteworthy layouts (config/limits.py), for the summary's warnings."""
    from servesim.config.limits import deployment_warnings

    dep = cfg.deployment
    if dep.disaggregation is None:
        return deployment_warnings(dep, deployment.arch, deployment.gpu)
    notes = []
    for role in ("prefill", "decode"):
        pool = getattr(deployment, role)
        notes += [f"{role} pool: {n}" for n in deployment_warnings(pool.cfg, pool.arch, pool.gpu)]
    return notes
def _prediction_interval(summary: dict, deployment: Deployment) -> dict:
    """The expected error band of mean TTFT and TPOT (servesim.perf.calibration.prediction_interval),
    from the calibration the deployment resolved; a disaggregated one reports its prefill pool's."""
    from servesim.perf.calibration import prediction_interval

    perf = getattr(deployment, "perf", None) or getattr(getattr(deployment, "prefill", None), "perf", None)
    if perf is None or perf.calibration is None:
        return prediction_interval(summary["latency"], None, "no calibration (perf.calibration: null, or a "
                                                             "fixed/linear/aic step-time model)")
    return prediction_interval(summary["latency"], perf.error_band)


def predict(config: Config | dict | str | Path | None = None, overrides: list[str] | None = None,
            progress: Callable[[int, float], None] | None = None) -> Prediction:
    """Simulate a deployment under a workload.

    ``config`` is a :class:`Config`, a mapping, a YAML path, or ``None`` for the built-in
    default example.  ``progress(n_done, sim_time)`` is called as the run advances.
    """
    # Not the run alone: reading a trace, building the deployment and the tables after the run
    # allocate enough to set off collections of the older generations, which walk the whole
    # workload graph (gc_threshold.py).
    with fewer_collections():
        return _predict(config, overrides, progress)


def _predict(config: Config | dict | str | Path | None, overrides: list[str] | None,
             progress: Callable[[int, float], None] | None) -> Prediction:
    t0 = time.perf_counter()
    cfg = load_config(config, overrides)
    source = build_source(cfg.workload, cfg.seed, config_base_dir(cfg))
    if source.agentic is not None and _uses_belady(cfg):
        from servesim.errors import ConfigError

        raise ConfigError("eviction_policy 'belady' needs every request's arrival before the run; an agentic "
                          "workload releases its requests as their dependencies fire (use lru, lfu or fifo)")
    if source.agentic is not None and source.agentic.load.profile is not None \
            and cfg.deployment.disaggregation is not None:
        from servesim.errors import ConfigError

        raise ConfigError("workload.agentic.profile cancels the requests in flight at its grace deadline, which "
                          "disaggregated prefill/decode cannot undo (a request may be between workers): "
                          "drop the profile or the disaggregation")
    if hasattr(progress, "expect"):  # report/progress.py: the count an agent graph gives once built
        progress.expect(source.num_requests)
    oracle = next_use_oracle(source) if _uses_belady(cfg) else None
    deployment = build_deployment(cfg, oracle)
    recorder, ts, stats = run_simulation(cfg, source, deployment, progress)
    if recorder.size == 0:
        raise WorkloadError(f"the workload has no requests ({source.description}): an empty trace, or a "
                            "window (start_ms/end_ms) that selects none; a run needs at least one request")
    summary = summarize(recorder, deployment.total_gpus)
    summary["workers"] = worker_breakdown(recorder, stats.workers, stats.sim_end)
    summary["fleet"] = fleet_summary(stats.workers, stats.sim_end)
    coordinator = getattr(deployment, "coordinator", None)  # disaggregated: prefill ids come first
    annotate_workers(summary, recorder, ts.columns() if ts is not None else None, stats.workers, stats.sim_end,
                     coordinator.n_prefill if coordinator is not None else None)
    summary["prediction_interval"] = _prediction_interval(summary, deployment)
    summary["run"] = {
        "sim_end_s": stats.sim_end,
        "events": stats.events,
        "late_session_turns": stats.late_session_turns,
        "mode": cfg.simulation.mode,
    }
    summary["workload"] = dict(source.counts)
    summary["warnings"] = input_warnings(summary, source.counts, _deployment_notes(cfg, deployment))
    summary.update(planning_summary(cfg, recorder, deployment, stats.workers, stats.sim_end, summary))
    summary["alerts"] = run_alerts(summary)
    plays = None
    if stats.agentic is not None:
        from servesim.metrics.plays import agentic_summary, play_rows

        plays = play_rows(stats.agentic, recorder)
        summary["agentic"] = agentic_summary(stats.agentic, recorder, plays)
    host = {"wall_s": time.perf_counter() - t0, "loop_wall_s": stats.wall_seconds}
    return Prediction(config=cfg, summary=summary, recorder=recorder, timeseries=ts, stats=stats,
                      deployment=deployment, workload=source.description, host=host, plays=plays)


def _arrow_ready(columns: dict) -> dict:
    """plays.parquet's columns for :func:`servesim.report.arrow.table` (string lists as Arrow strings)."""
    from servesim.report.arrow import string_array

    return {name: string_array(v) if isinstance(v, list) else v for name, v in columns.items()}
