"""Sweep executors: wall time of a 200-candidate grid over a 10,000-request trace, with the local
process pool and with local Ray, and each executor's overhead per candidate.

Usage::

    PYTHONPATH=src python benchmarks/bench_sweep.py                      # 200 candidates, 10k requests
    PYTHONPATH=src python benchmarks/bench_sweep.py --executors local --jobs 2
    PYTHONPATH=src python benchmarks/bench_sweep.py --small              # 8 candidates, 1,000 requests

The trace is the first ``--requests`` requests of ../shared/data/traces/mooncake_conversation.jsonl
(Llama-3.1-8B-Instruct on H100, SLO TTFT p90 <= 2 s and TPOT p90 <= 50 ms).  The grid:
workers 1..10 x engine {sglang, vllm} x router {round_robin, least_loaded, power_of_two,
random, kv_aware} x tp {1, 2} = 200 candidates.

For each executor the script reports the sweep's wall time, the sum of the candidates' own
run times (``host_s``, measured where each ran: what one process running them back to back
would spend), the speed-up (sum / wall) and the overhead per candidate::

    overhead = (jobs x wall - sum of host_s) / candidates

i.e. the slot-seconds each candidate costs beyond its own simulation: the executor's start-up
(a process pool forks its workers; Ray starts its local cluster and imports servesim in each
worker), task dispatch and result transfer, and the sweep's own checks and journal.  The
executor's start-up is also reported alone (``start_s``).  Both executors run the same
candidates, and the script checks that their rows are identical.

Results (docs/planning.md, "Benchmark"), 2-core machine with nothing else running, 10,000
requests, ``--jobs 2``: process pool 392 s wall, 0.056 s overhead per candidate; local Ray 419 s
wall, 0.137 s per candidate (7.2 s start-up); rows identical.  Wall times carry whatever else
runs on the machine; compare the two executors of one run, not across runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: ../shared/data beside the checkout (a worktree one level deeper finds it one level up).
TRACE = next((p for p in (REPO.parent / "shared", REPO.parent.parent / "shared")
              if (p / "data").exists()), REPO.parent / "shared") / "data" / "traces" / "mooncake_conversation.jsonl"


def base_config(trace: Path, requests: int) -> dict:
    return {
        "seed": 0,
        "workload": {"kind": "trace", "path": str(trace), "limit": requests},
        "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm"},
        "output": {"dir": None, "timeseries": False},
        "slo": {"ttft_ms": {"p90": 2000}, "tpot_ms": {"p90": 50}},
    }


def grid(small: bool) -> dict:
    if small:
        return {"deployment.workers": [4, 8], "deployment.engine.name": ["sglang", "vllm"],
                "deployment.router": ["round_robin", "least_loaded"]}
    return {"deployment.workers": list(range(1, 11)), "deployment.engine.name": ["sglang", "vllm"],
            "deployment.router": ["round_robin", "least_loaded", "power_of_two", "random", "kv_aware"],
            "deployment.tp": [1, 2]}


def start_time(kind: str, jobs: int) -> float:
    """Seconds to start the executor alone (and shut it down)."""
    from servesim.plan.executors import make_executor
    from servesim.plan.spec import ExecutorConfig

    t0 = time.perf_counter()
    ex = make_executor(ExecutorConfig(kind=kind, jobs=jobs))
    list(ex.map([]))
    ex.close()
    return time.perf_counter() - t0


def run(kind: str, jobs: int, base: dict, params: dict, out: Path) -> tuple[dict, list[dict]]:
    from servesim.plan.sweep import run_sweep

    spec = {"parameters": params, "executor": {"kind": kind, "jobs": jobs}, "require_slo": True}
    t0 = time.perf_counter()
    res = run_sweep(base, spec=spec, out=out)
    wall = time.perf_counter() - t0
    n = len(res.rows)
    host = sum(r.get("host_s", 0.0) for r in res.rows if r["status"] == "ok")
    return {
        "executor": kind, "jobs": jobs, "candidates": n,
        "ok": sum(r["status"] == "ok" for r in res.rows),
        "wall_s": round(wall, 2), "sum_candidate_s": round(host, 2),
        "speedup_vs_serial": round(host / wall, 3),
        "overhead_per_candidate_s": round((jobs * wall - host) / n, 4),
        "chosen": res.chosen["params"] if res.chosen else None,
    }, res.rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--executors", default="local,ray")
    ap.add_argument("--small", action="store_true", help="8 candidates over 1,000 requests (a quick check)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"{args.trace}: not found (the Mooncake conversation trace)", file=sys.stderr)
        return 2
    requests = 1000 if args.small else args.requests
    base, params = base_config(args.trace, requests), grid(args.small)
    results, rows = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.executors.split(","):
            start = start_time(kind, args.jobs)
            res, rows[kind] = run(kind, args.jobs, base, params, Path(tmp) / kind)
            res["start_s"] = round(start, 2)
            results.append(res)
            print(json.dumps(res), flush=True)
    strip = {k: [{c: v for c, v in r.items() if c != "host_s"} for r in rs] for k, rs in rows.items()}
    same = all(v == next(iter(strip.values())) for v in strip.values())
    doc = {"requests": requests, "results": results, "identical_rows": same}
    print(json.dumps({"identical_rows": same}))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
