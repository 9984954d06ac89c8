"""Prefix reuse and play makespan on a generated agent workload, by router and KV-cache size.

Agent plays re-send their growing context every turn, so where a turn lands (the router) and
how much KV a worker keeps (its cache size) decide how much of it is recomputed.  This runs
one generated workload (``WORKLOAD``) on 4 vLLM or SGLang workers (Llama-3.1-8B, H100) with
``round_robin`` and ``kv_aware`` routing and with 35% and 90% of GPU memory for the model and
KV cache, and prints prefix reuse (actual and ideal) and play makespan (mean, p90)::

    python benchmarks/agentic_cache_check.py [--engine vllm] [--plays 48] [--lanes 16]

docs/workload.md ("Routing and cache size on agent plays") has the numbers.
"""

from __future__ import annotations

import argparse
import copy
import sys

from servesim.api import predict

WORKLOAD = {
    "kind": "agentic", "plays": 48, "block_size": 64, "system_prompt": 8000,
    "task": {"dist": "lognormal", "median": 2000, "sigma": 0.5, "max": 12000},
    "turns": {"dist": "uniform", "low": 6, "high": 16},
    "output": {"dist": "lognormal", "median": 200, "sigma": 0.6, "max": 2000},
    "tool_output": {"dist": "lognormal", "median": 1500, "sigma": 0.8, "max": 16000},
    "tool_latency_s": {"dist": "lognormal", "median": 1.0, "sigma": 0.8, "max": 20},
    "subagents": {"probability": 0.25, "fanout": {"dist": "uniform", "low": 1, "high": 3},
                  "turns": {"dist": "uniform", "low": 2, "high": 6}, "task": {"dist": "fixed", "value": 1500},
                  "background": 0.3},
    "compaction": {"threshold": 100000, "summary": 8000},
    "agentic": {"arrival": "lanes", "lanes": 16},
}


def config(engine: str, router: str, memory: float, plays: int, lanes: int, seed: int = 1) -> dict:
    wl = copy.deepcopy(WORKLOAD)
    wl["plays"], wl["agentic"]["lanes"] = plays, lanes
    key = "gpu_memory_utilization" if engine == "vllm" else "mem_fraction_static"
    return {"seed": seed, "workload": wl,
            "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "workers": 4,
                           "engine": {"name": engine, key: memory}, "router": router},
            "output": {"dir": None}}


def measure(engine: str, router: str, memory: float, plays: int, lanes: int) -> dict:
    a = predict(config(engine, router, memory, plays, lanes)).summary["agentic"]
    return {"engine": engine, "router": router, "memory": memory, "plays_completed": a["plays_completed"],
            "prefix_reuse": a["prefix_reuse"], "ideal_prefix_reuse": a["ideal_prefix_reuse"],
            "makespan_mean_s": a["makespan_s"]["mean"], "makespan_p90_s": a["makespan_s"]["p90"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="vllm", choices=("vllm", "sglang"))
    ap.add_argument("--plays", type=int, default=48)
    ap.add_argument("--lanes", type=int, default=16)
    args = ap.parse_args()
    print("| engine | router | GPU memory | plays | prefix reuse | ideal | makespan mean (s) | p90 (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for memory in (0.35, 0.9):
        for router in ("round_robin", "kv_aware"):
            r = measure(args.engine, router, memory, args.plays, args.lanes)
            print(f"| {r['engine']} | {router} | {memory:.0%} | {r['plays_completed']} | {r['prefix_reuse']:.1%} | "
                  f"{r['ideal_prefix_reuse']:.1%} | {r['makespan_mean_s']:.1f} | {r['makespan_p90_s']:.1f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
