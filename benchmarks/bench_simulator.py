"""Simulator speed on fixed workloads: host CPU seconds, wall seconds, peak RSS, µs per request.

Each workload runs in a fresh child process so that peak RSS is its own.  CPU seconds cover
``predict`` (config, deployment, simulation, summary); importing servesim is measured apart
(``import s``, about a second, a fixed cost).  Usage::

    python benchmarks/bench_simulator.py                     # all workloads
    python benchmarks/bench_simulator.py --only synthetic-10k --engine sglang
    python benchmarks/bench_simulator.py --mode step          # pass-by-pass baseline

Workloads (docs/performance.md):
  synthetic-N   Poisson 8 req/s, input U[1000, 4000], output U[200, 1000], 60% of requests
                sharing one of 64 prefixes of 1,024 tokens; Qwen3-32B FP8 on H200, tp 1, 4 workers
  mooncake      the full ../shared/data/traces/mooncake_conversation.jsonl, 8 workers Llama-3.1-8B H100
  closed-1k1k   closed loop 1k/1k at concurrency 256, 2,560 requests, 1 worker
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO.parent / "shared" / "data" / "traces" / "mooncake_conversation.jsonl"


def synthetic(n: int, engine: str) -> dict:
    return {
        "seed": 1,
        "workload": {
            "kind": "synthetic", "num_requests": n,
            "arrival": {"process": "poisson", "rate": 8.0},
            "input": {"dist": "uniform", "low": 1000, "high": 4000},
            "output": {"dist": "uniform", "low": 200, "high": 1000},
            "prefix": {"num_groups": 64, "length": 1024, "share": 0.6},
        },
        "deployment": {"model": "Qwen/Qwen3-32B", "gpu": "h200_sxm", "tp": 1, "workers": 4,
                       "weight_dtype": "fp8", "kv_dtype": "fp8", "engine": {"name": engine}},
        "output": {"dir": None, "timeseries": False},
    }


def mooncake(engine: str) -> dict:
    return {
        "workload": {"kind": "trace", "path": str(TRACE)},
        "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "workers": 8,
                       "engine": {"name": engine}},
        "output": {"dir": None, "timeseries": False},
    }


def closed(engine: str) -> dict:
    return {
        "workload": {"kind": "closed_loop", "recipe": "fixed", "concurrency": 256, "num_prompts": 2560,
                     "warmup": 0, "isl": 1024, "osl": 1024},
        "deployment": {"model": "Qwen/Qwen3-32B", "gpu": "h200_sxm", "weight_dtype": "fp8", "kv_dtype": "fp8",
                       "engine": {"name": engine}},
        "output": {"dir": None, "timeseries": False},
    }


WORKLOADS = {
    "synthetic-10k": lambda e: synthetic(10_000, e),
    "synthetic-100k": lambda e: synthetic(100_000, e),
    "synthetic-1m": lambda e: synthetic(1_000_000, e),
    "mooncake": mooncake,
    "closed-1k1k": closed,
}
DEFAULT = ("synthetic-10k", "synthetic-100k", "mooncake", "closed-1k1k")


def child(cfg: dict, mode: str) -> None:
    """Run one prediction in this process and print its costs as JSON."""
    i0 = time.process_time()
    from servesim.api import predict  # imports are timed apart: a fixed cost, not per request

    import_cpu = time.process_time() - i0
    cfg["simulation"] = {"mode": mode}
    t0, c0 = time.perf_counter(), time.process_time()
    pred = predict(cfg)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = pred.summary["requests"]["total"]
    print(json.dumps({
        "requests": n, "cpu_s": cpu, "wall_s": wall, "import_cpu_s": import_cpu,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "us_per_request": cpu / n * 1e6, "sim_duration_s": pred.summary["run"]["sim_end_s"],
        "completed": pred.summary["requests"]["completed"],
    }))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", choices=sorted(WORKLOADS), help="workload(s) to run")
    ap.add_argument("--engine", action="append", choices=("sglang", "vllm", "trtllm"))
    ap.add_argument("--mode", choices=("fast", "step"), default="fast")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        name, engine = args.child.split(":")
        child(WORKLOADS[name](engine), args.mode)
        return 0
    names = args.only or list(DEFAULT)
    engines = args.engine or ["sglang", "vllm"]
    print(f"{'workload':16} {'engine':7} {'requests':>9} {'cpu s':>8} {'wall s':>8} {'rss MB':>8} "
          f"{'us/req':>8} {'sim s':>10} {'import s':>9}")
    for name in names:
        if name == "mooncake" and not TRACE.exists():
            print(f"{name:16} skipped: {TRACE} not found")
            continue
        for engine in engines:
            out = subprocess.run([sys.executable, __file__, "--child", f"{name}:{engine}", "--mode", args.mode],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                print(f"{name:16} {engine:7} failed: {out.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{name:16} {engine:7} {r['requests']:>9,} {r['cpu_s']:>8.2f} {r['wall_s']:>8.2f} "
                  f"{r['peak_rss_mb']:>8.0f} {r['us_per_request']:>8.0f} {r['sim_duration_s']:>10.0f} "
                  f"{r['import_cpu_s']:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
