"""The simulator's cost on an agentic workload, beside AISimulate's on the same trace.

Builds AgentX-like plays with servesim's synthetic agent generator (64-token blocks, a 20k-token
shared system prompt, contexts growing by answers and tool outputs up to ~120k tokens (Llama-3.1-8B's context) before
compaction, subagent fan-out and joins), starts them as a Poisson process, writes them as an
AISimulate ``agentic_mooncake`` v2 trace, and replays that one file:

- with servesim (``format: agentic_mooncake``, trace timestamps, floors on), per engine, each
  in a fresh process, its output files written (``requests.parquet``, ``plays.parquet``, the
  time series): CPU seconds, per request and per play, and the peak RSS;
- with AISimulate 0.13 (``--aisimulate VENV/bin/aisimulate``: a separate virtual environment,
  never a servesim dependency), same model, GPU, workers, engine and trace, per-request output
  on: its CPU seconds and the ratio.  Both sides are whole processes (``process_cpu_s``: imports
  and start-up included); servesim's ``cpu_s`` is its ``predict`` call and the writing of its files.

::

    python benchmarks/bench_agentic.py --plays 64 --rate 0.2 --workers 8 \\
        --engines sglang,vllm --aisimulate /tmp/aisim/bin/aisimulate

``--plays 2000 --rate 1`` is closer to the AgentX seed scenario (hundreds of plays in flight,
an hour of simulated time).  Prints one JSON line per run and the ratios at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
AISIM_MODEL = "meta-llama/Meta-Llama-3.1-8B"  # the same architecture, bundled with AISimulate
#: KV block (page) size each side runs with, per engine.  The seed scenario of the AgentX replay
#: is 64-token blocks; AISimulate 0.13 runs vLLM at 64 when none is given (its
#: ``resolve_block_size``) and SGLang at 1 token, so both sides are told the same value here
#: rather than each falling back to its own default (servesim's vLLM default is vLLM's 16).
BLOCK_SIZE = {"vllm": 64, "sglang": 1}


def agentx_workload(plays: int, rate: float) -> dict:
    """An AgentX-like synthetic agent workload (docs/workload.md, ``kind: agentic``)."""
    return {
        "kind": "agentic", "plays": plays, "block_size": 64, "system_prompt": 20000,
        "task": {"dist": "lognormal", "median": 3000, "sigma": 0.6, "max": 20000},
        "turns": {"dist": "uniform", "low": 8, "high": 30},
        "output": {"dist": "lognormal", "median": 250, "sigma": 0.8, "max": 4000},
        "tool_output": {"dist": "lognormal", "median": 1500, "sigma": 1.0, "max": 30000},
        "tool_latency_s": {"dist": "lognormal", "median": 2.0, "sigma": 1.0, "max": 60},
        "subagents": {"probability": 0.2, "fanout": {"dist": "uniform", "low": 1, "high": 4},
                      "turns": {"dist": "uniform", "low": 3, "high": 10}, "task": {"dist": "fixed", "value": 2000},
                      "background": 0.3},
        "compaction": {"threshold": 120000, "summary": 20000},  # Llama-3.1-8B: 128k context
        "agentic": {"arrival": "poisson", "rate": rate},
    }


def write_trace(plays: int, rate: float, seed: int, path: Path) -> int:
    from servesim.config import load_config
    from servesim.workload.agentic.export import write_agentic_mooncake_v2
    from servesim.workload.agentic.generator import generate_agentic
    from servesim.workload.agentic.load import play_starts

    cfg = load_config({"seed": seed, "workload": agentx_workload(plays, rate),
                       "deployment": {"model": MODEL, "gpu": "h100_sxm"}}).workload
    graph = generate_agentic(cfg, seed)
    return write_agentic_mooncake_v2(graph, play_starts(graph, cfg.agentic, 1.0, seed), path, model=MODEL)


def servesim_config(trace: Path, engine: str, workers: int) -> dict:
    return {
        "seed": 0,
        "workload": {"kind": "trace", "format": "agentic_mooncake", "path": str(trace)},
        "deployment": {"model": MODEL, "gpu": "h100_sxm", "workers": workers, "router": "round_robin",
                       "engine": {"name": engine, **_block_option(engine)}},
        "output": {"dir": None},
    }


def _block_option(engine: str) -> dict:
    """servesim's engine option for :data:`BLOCK_SIZE` (vLLM's ``block_size``, SGLang's ``page_size``)."""
    return {"block_size" if engine == "vllm" else "page_size": BLOCK_SIZE[engine]}


def run_servesim(trace: Path, engine: str, workers: int) -> dict:
    """One servesim run in this process (called in a child: its peak RSS is the run's), its
    per-request output written as AISimulate writes its own (requests, plays, time series)."""
    from servesim.api import predict

    t0 = time.process_time()
    pred = predict(servesim_config(trace, engine, workers))
    t1 = time.process_time()
    with tempfile.TemporaryDirectory() as out:
        pred.write(out)
    cpu = time.process_time() - t0
    a = pred.summary["agentic"]
    n = pred.recorder.size
    return {"simulator": "servesim", "engine": engine, "requests": n, "plays": a["plays"],
            "plays_completed": a["plays_completed"], "cpu_s": cpu, "write_cpu_s": cpu - (t1 - t0),
            "cpu_s_per_request": cpu / n,
            "cpu_s_per_play": cpu / max(a["plays"], 1), "peak_rss_mb": _rss_mb(resource.RUSAGE_SELF),
            "sim_end_s": pred.summary["run"]["sim_end_s"], "prefix_reuse": a["prefix_reuse"],
            "makespan_p50_s": a["makespan_s"]["p50"]}


def aisimulate_config(trace: Path, engine: str, workers: int) -> dict:
    return {
        "traffic": {"source": {"type": "trace", "format": "agentic_mooncake", "paths": [str(trace)]},
                    "load": {"type": "trace_timestamps"}},
        "engine": {"mode": "aggregated", "model": AISIM_MODEL, "hardware": "h100_sxm", "backend": engine,
                   "workers": {"aggregated": {"parallelism": {"replicas": workers},
                                              "kv_cache": {"prefix_caching": True,
                                                           "block_size": BLOCK_SIZE[engine]}}}},
    }


def run_aisimulate(exe: str, trace: Path, engine: str, workers: int, tmp: Path) -> dict:
    import yaml

    cfg = tmp / f"aisim_{engine}.yaml"
    cfg.write_text(yaml.safe_dump(aisimulate_config(trace, engine, workers)))
    cmd = [exe, "predict", "--stack", "engine", "-c", str(cfg), "--output-dir", str(tmp / f"aisim_{engine}"),
           "--overwrite", "--capture-per-request", "--format", "json"]
    # Through a small parent of its own, whose children are AISimulate's processes alone (a
    # process's RUSAGE_CHILDREN peak RSS is the largest of all its children, servesim's included).
    proc = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True)
    usage = json.loads(proc.stderr.strip().splitlines()[-1])
    out = {"simulator": "aisimulate", "engine": engine, "cpu_s": usage["cpu_s"], "returncode": usage["rc"],
           "peak_rss_mb": usage["peak_rss_mb"]}
    req = tmp / f"aisim_{engine}" / "requests.jsonl"
    if usage["rc"] != 0 or not req.exists():
        out["error"] = (proc.stderr or proc.stdout)[-800:]
        return out
    n = sum(1 for _ in open(req))
    out.update(requests=n, cpu_s_per_request=usage["cpu_s"] / max(n, 1))
    return out


#: Runs argv, then prints its CPU seconds, exit status and peak RSS as JSON on stderr.
_MEASURE = """
import json, resource, subprocess, sys
p = subprocess.run(sys.argv[1:], stdout=sys.stdout, stderr=sys.stderr)
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": p.returncode, "cpu_s": u.ru_utime + u.ru_stime, "peak_rss_mb": u.ru_maxrss / 1024}),
      file=sys.stderr)
"""


def _rss_mb(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # Linux: kilobytes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plays", type=int, default=64)
    ap.add_argument("--rate", type=float, default=0.2, help="plays started per second (Poisson)")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--engines", default="sglang,vllm")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--aisimulate", metavar="EXE", help="the aisimulate command of its own virtual environment")
    ap.add_argument("--trace", type=Path, help="reuse this v2 trace instead of generating one")
    ap.add_argument("--child", nargs=3, metavar=("TRACE", "ENGINE", "WORKERS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        # as `servesim predict` runs (servesim/cli.py): numpy's OpenBLAS threads would only spin
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        print(json.dumps(run_servesim(Path(args.child[0]), args.child[1], int(args.child[2]))))
        return 0
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        trace = args.trace or tmp / "agentx.jsonl"
        if args.trace is None:
            rows = write_trace(args.plays, args.rate, args.seed, trace)
            print(json.dumps({"trace": str(trace), "rows": rows, "plays": args.plays}), flush=True)
        results = {}
        for engine in args.engines.split(","):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            proc = subprocess.run([sys.executable, __file__, "--child", str(trace), engine, str(args.workers)],
                                  capture_output=True, text=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if proc.returncode != 0:
                print(proc.stderr[-2000:], file=sys.stderr)
                return 1
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            # The whole process (imports included), as AISimulate's is measured.
            res["process_cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            print(json.dumps(res), flush=True)
            results[engine] = res
            if args.aisimulate:
                ref = run_aisimulate(args.aisimulate, trace, engine, args.workers, tmp)
                print(json.dumps(ref), flush=True)
                if "error" not in ref and ref["cpu_s"]:
                    print(json.dumps({"engine": engine, "requests": res["requests"],
                                      "process_cpu_ratio_servesim_over_aisimulate": res["process_cpu_s"] / ref["cpu_s"],
                                      "servesim_run_cpu_over_aisimulate_process_cpu": res["cpu_s"] / ref["cpu_s"]}),
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
