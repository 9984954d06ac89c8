"""Simulator speed on fixed workloads: host CPU seconds, wall seconds, peak RSS, µs per request.

Each workload runs in a fresh child process so that peak RSS is its own.  CPU seconds cover
``predict`` (config, deployment, simulation, summary); importing servesim is measured apart
(``import s``, about a second, a fixed cost).  Usage::

    python benchmarks/bench_simulator.py                     # all workloads
    python benchmarks/bench_simulator.py --only synthetic-10k --engine sglang
    python benchmarks/bench_simulator.py --mode step          # pass-by-pass baseline
    python benchmarks/bench_simulator.py --aisimulate VENV/bin/aisimulate --requests 100000 --repeat 3
    python benchmarks/bench_simulator.py --workload1 50000 --engine vllm   # in-process, for paired runs

``--workload1 N`` runs servesim alone on workload 1's trace of N requests (the same config as
``--aisimulate`` uses, per-request output on) in this process and prints its CPU seconds as JSON:
one whole command to time against another tree (``PYTHONPATH=<tree>/src``) in alternating
pairs.  ``--aisimulate EXE`` runs workload 1 through servesim and through NVIDIA's AISimulate
(``pip install --pre aisimulate`` into a separate virtual environment; a development
release, e.g. 0.13.0.dev202610270000000085 — the 0.13.0 release is an installer stub that
fetches its wheel from another index) and prints the CPU-time ratio measured in the same
run.  AISimulate's built-in synthetic traffic takes fixed lengths and one global prefix, so
both simulators replay the same Mooncake-format trace of workload 1 (``write_workload1_trace``):
Poisson arrivals, uniform lengths, 60% of requests opening with one of 64 prefixes of two
512-token blocks.  Both run as whole commands (``servesim predict``, ``aisimulate predict``)
with per-request output on; CPU = user + system of the process and the children it waited
for (as ``/usr/bin/time`` reports), peak RSS = the largest single process.  Each simulator
keeps its own engine defaults (AISimulate: 8,192 batched tokens, 256 sequences, round-robin
placement, operator tables shipped in its wheel; servesim: the engine models' defaults and
the analytic model with the bundled calibration).

Workloads (docs/performance.md):
  synthetic-N   Poisson 8 req/s, input U[1000, 4000], output U[200, 1000], 60% of requests
                sharing one of 64 prefixes of 1,024 tokens; Qwen3-32B FP8 on H200, tp 1, 4 workers
  mooncake      the full ../shared/data/traces/mooncake_conversation.jsonl, 8 workers Llama-3.1-8B H100
  closed-1k1k   closed loop 1k/1k at concurrency 256, 2,560 requests, 1 worker
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
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


# -- servesim vs AISimulate on workload 1 -------------------------------------------------------
TRACE_BLOCK = 512


def write_workload1_trace(n: int, path: Path, seed: int = 1) -> None:
    """Workload 1 as a Mooncake-format trace: Poisson 8 req/s, input U{1000..4000}, output
    U{200..1000}; 60% of prompts open with one of 64 prefixes of 1,024 tokens (two blocks of
    512), every other block is unique.  A prefixed prompt shorter than 1,024 tokens is the start
    of its prefix (the prefix counts within the input length)."""
    rng = random.Random(seed)
    groups, prefix_blocks, share = 64, 1024 // TRACE_BLOCK, 0.6
    next_id = groups * prefix_blocks
    t = 0.0
    with open(path, "w") as f:
        for _ in range(n):
            t += rng.expovariate(8.0)
            isl, osl = rng.randint(1000, 4000), rng.randint(200, 1000)
            n_blocks = -(-isl // TRACE_BLOCK)
            ids = []
            if rng.random() < share:
                g = rng.randrange(groups)
                ids = list(range(g * prefix_blocks, (g + 1) * prefix_blocks))[:n_blocks]
            while len(ids) < n_blocks:
                ids.append(next_id)
                next_id += 1
            f.write(json.dumps({"timestamp": round(t * 1000.0, 3), "input_length": isl,
                                "output_length": osl, "hash_ids": ids}) + "\n")


def workload1_config(trace: Path, engine: str, out_dir: Path) -> dict:
    """servesim's config for workload 1 replayed from ``trace`` (per-request output to ``out_dir``)."""
    return {"seed": 1,
            "workload": {"kind": "trace", "path": str(trace), "block_size": TRACE_BLOCK},
            "deployment": {"model": "Qwen/Qwen3-32B", "gpu": "h200_sxm", "tp": 1, "workers": 4,
                           "weight_dtype": "fp8", "kv_dtype": "fp8", "engine": {"name": engine}},
            "output": {"dir": str(out_dir), "requests": True, "timeseries": False}}


def run_workload1(n: int, engine: str) -> int:
    """Workload 1 of ``n`` requests through servesim in this process; prints CPU seconds as JSON."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the CLI sets it
    with tempfile.TemporaryDirectory(prefix="w1-") as tmp:
        trace = Path(tmp) / f"workload1_{n}.jsonl"
        write_workload1_trace(n, trace)
        from servesim.api import predict

        c0 = time.process_time()
        pred = predict(workload1_config(trace, engine, Path(tmp) / "out"))
        print(json.dumps({"engine": engine, "requests": n, "cpu_s": time.process_time() - c0,
                          "completed": pred.summary["requests"]["completed"]}))
    return 0


def run_measured(cmd: list[str], log: Path) -> dict:
    """Run ``cmd`` (output to ``log``); CPU seconds of it and its waited-for children, peak RSS, wall."""
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        _pid, status, ru = os.wait4(proc.pid, 0)  # rusage of the process tree it waited for
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"rc": proc.returncode, "cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_mb": ru.ru_maxrss / 1024,
            "wall_s": time.perf_counter() - t0, "log": log}


def compare_aisimulate(exe: str, n: int, engines: list[str], repeat: int = 1) -> int:
    """Workload 1 through both simulators, same trace, per-request output on; prints the ratio.

    With ``repeat`` > 1 the two run in turn that many times (servesim, AISimulate, servesim,
    ...): each run is printed, then the medians and the median of the pairs' CPU ratios
    (this machine's speed drifts by tens of percent within minutes; a pair shares the drift).
    """
    import shutil

    import yaml

    if shutil.which(exe) is None:
        print(f"--aisimulate: {exe!r} is not an executable; expected the aisimulate command of a virtual "
              "environment with AISimulate installed (see this script's docstring)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="w1-") as tmp:
        tmpd = Path(tmp)
        trace = tmpd / f"workload1_{n}.jsonl"
        write_workload1_trace(n, trace)
        print(f"workload 1 as a trace: {n:,} requests ({trace.stat().st_size / 1e6:.0f} MB)")
        print(f"{'simulator':11} {'engine':7} {'cpu s':>8} {'wall s':>8} {'rss MB':>8} {'us/req':>8}")
        for engine in engines:
            ss_cfg = workload1_config(trace, engine, tmpd / f"servesim_{engine}")
            ai_cfg = {"traffic": {"source": {"type": "trace", "format": "mooncake", "paths": [str(trace)],
                                             "block_size": TRACE_BLOCK},
                                  "load": {"type": "trace_timestamps"}},
                      "engine": {"mode": "aggregated", "model": "Qwen/Qwen3-32B-FP8", "hardware": "h200_sxm",
                                 "backend": engine, "kvcache_quant_mode": "fp8",
                                 "workers": {"aggregated": {"parallelism": {"replicas": 4, "tensor": 1}}}}}
            ss_path, ai_path = tmpd / f"servesim_{engine}.yaml", tmpd / f"aisimulate_{engine}.yaml"
            ss_path.write_text(yaml.safe_dump(ss_cfg))
            ai_path.write_text(yaml.safe_dump(ai_cfg))
            servesim_cli = [sys.executable, "-c", "import sys; from servesim.cli import main; sys.exit(main())"]
            commands = {
                "servesim": [*servesim_cli, "predict", str(ss_path), "--quiet"],
                "aisimulate": [exe, "predict", "-c", str(ai_path), "--output-dir", str(tmpd / f"aisimulate_{engine}"),
                               "--overwrite", "--capture-per-request"],
            }
            pairs = []
            for _ in range(repeat):
                runs = {name: run_measured(cmd, tmpd / f"{name}_{engine}.log") for name, cmd in commands.items()}
                for name, r in runs.items():
                    if r["rc"] != 0:
                        tail = r["log"].read_text().strip().splitlines()[-1:]
                        print(f"{name:11} {engine:7} failed (exit {r['rc']}): {tail}")
                        continue
                    print(f"{name:11} {engine:7} {r['cpu_s']:>8.2f} {r['wall_s']:>8.2f} {r['peak_rss_mb']:>8.0f} "
                          f"{r['cpu_s'] / n * 1e6:>8.0f}")
                if runs["servesim"]["rc"] == 0 and runs["aisimulate"]["rc"] == 0:
                    a, b = runs["servesim"], runs["aisimulate"]
                    pairs.append((a, b))
                    print(f"{'ratio':11} {engine:7} servesim / AISimulate: CPU {a['cpu_s'] / b['cpu_s']:.3f}, "
                          f"peak RSS {a['peak_rss_mb'] / b['peak_rss_mb']:.3f}")
            if len(pairs) > 1:
                med = statistics.median
                cpu = [a["cpu_s"] / b["cpu_s"] for a, b in pairs]
                rss = [a["peak_rss_mb"] / b["peak_rss_mb"] for a, b in pairs]
                print(f"{'median':11} {engine:7} of {len(pairs)} pairs: servesim {med(a['cpu_s'] for a, _ in pairs):.2f} s, "
                      f"AISimulate {med(b['cpu_s'] for _, b in pairs):.2f} s; CPU ratio {med(cpu):.3f} "
                      f"(pairs {min(cpu):.3f}-{max(cpu):.3f}), peak RSS ratio {med(rss):.3f}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", choices=sorted(WORKLOADS), help="workload(s) to run")
    ap.add_argument("--engine", action="append", choices=("sglang", "vllm", "trtllm"))
    ap.add_argument("--mode", choices=("fast", "step"), default="fast")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--aisimulate", metavar="EXE", help="compare with AISimulate on workload 1 (see above)")
    ap.add_argument("--requests", type=int, default=10_000, help="requests of workload 1 for --aisimulate")
    ap.add_argument("--repeat", type=int, default=1, help="--aisimulate: run both simulators this many times in "
                                                          "turn and print the medians")
    ap.add_argument("--workload1", type=int, metavar="N", help="run servesim alone on workload 1 of N requests, "
                                                               "in this process (see above)")
    args = ap.parse_args()
    if args.workload1:
        engines = args.engine or ["vllm"]
        if len(engines) != 1:
            ap.error("--workload1 runs one engine: give --engine once")
        return run_workload1(args.workload1, engines[0])
    if not args.child:
        from servesim.compiled import describe

        print(f"servesim {describe()}")
    if args.aisimulate:
        if args.repeat < 1:
            ap.error("--repeat needs at least 1")
        return compare_aisimulate(args.aisimulate, args.requests, args.engine or ["sglang", "vllm"], args.repeat)
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
