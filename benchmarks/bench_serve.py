"""``servesim serve`` under an open-loop load, against the offline simulation of the same arrivals.

Starts ``servesim serve`` on loopback in a process of its own, sends a Poisson load of completions
with the project's asyncio client (token-id prompts sharing a prefix, ``ignore_eos``),
scrapes ``/metrics`` during the run, then replays exactly what was sent through
``servesim predict`` and prints served against predicted TTFT and inter-token latency (virtual
seconds: the client's wall times × speed), the request errors and the gauges seen.

    python benchmarks/bench_serve.py --requests 200 --rate 8 --speed 1
    python benchmarks/bench_serve.py --engine sglang --workers 2 --requests 100
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time

import tempfile
from pathlib import Path

import yaml

from servesim.serve.compare import compare
from servesim.serve.loadgen import poisson_plan, run_plan, scrape_metrics
from servesim.serve.metrics import ENGINE_METRICS
from servesim.serve.server import serve_process


def config(engine: str, workers: int, model: str, gpu: str) -> dict:
    return {"seed": 0, "perf": {"model": "analytic", "calibration": None},
            "deployment": {"model": model, "gpu": gpu, "engine": {"name": engine}, "tp": 1, "workers": workers,
                           "router": "round_robin"},
            "workload": {"kind": "synthetic", "num_requests": 1, "arrival": {"process": "poisson", "rate": 1.0},
                         "input": {"dist": "fixed", "value": 100}, "output": {"dist": "fixed", "value": 10}}, "output": {"dir": None}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="vllm", choices=sorted(ENGINE_METRICS))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--model", default="meta-llama/Llama-3.1-8B-Instruct")
    ap.add_argument("--gpu", default="h100_sxm")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--rate", type=float, default=8.0, help="requests per virtual second")
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--input", default="500,3000", help="uniform prompt length range")
    ap.add_argument("--output", default="16,128", help="uniform output length range")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    lo_in, hi_in = map(int, args.input.split(","))
    lo_out, hi_out = map(int, args.output.split(","))
    cfg = config(args.engine, args.workers, args.model, args.gpu)
    # The plan's times are wall seconds: a virtual rate r is r × speed per wall second.
    plan = poisson_plan(args.requests, args.rate * args.speed, (lo_in, hi_in), (lo_out, hi_out), args.seed,
                        shared_prefix=256)
    names = ENGINE_METRICS[args.engine]
    gauges = (names.prefix + names.running, names.prefix + names.waiting, names.prefix + names.kv_usage[0])
    seen: list[dict[str, float]] = []
    tmp = tempfile.TemporaryDirectory()
    cfg_path = Path(tmp.name) / "serve.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    with serve_process(cfg_path, "--speed", str(args.speed)) as url:
        urls = [url]
        stop = threading.Event()

        def scraper() -> None:
            while not stop.is_set():
                seen.append(scrape_metrics(urls[0], gauges))
                time.sleep(0.2)

        thread = threading.Thread(target=scraper)
        thread.start()
        wall0 = time.perf_counter()
        try:
            start, outcomes = asyncio.run(run_plan(urls[0], args.model, plan))
        finally:
            stop.set()
            thread.join()
        wall = time.perf_counter() - wall0
    errors = [o for o in outcomes if o.status != 200 or o.error]
    cmp, _ = compare(cfg, plan, outcomes, start, args.speed, 16)
    print(f"{args.requests} requests, {args.engine} x {args.workers}, speed {args.speed:g}: {wall:.1f} s wall, "
          f"{len(errors)} errors")
    print(f"{'':>12} {'served p50':>11} {'offline p50':>11} {'served p90':>11} {'offline p90':>11} "
          f"{'served mean':>11} {'offline mean':>12}")
    for name, s, o in (("TTFT ms", cmp.served_ttft, cmp.offline_ttft), ("ITL ms", cmp.served_itl, cmp.offline_itl)):
        print(f"{name:>12} {s.p50 * 1e3:11.1f} {o.p50 * 1e3:11.1f} {s.p90 * 1e3:11.1f} {o.p90 * 1e3:11.1f} "
              f"{s.mean * 1e3:11.1f} {o.mean * 1e3:12.1f}")
    for g in gauges:
        values = [s.get(g, 0.0) for s in seen]
        print(f"{g}: max {max(values):.3g}, scrapes {len(values)}")


if __name__ == "__main__":
    main()
