"""Peak resident memory of `servesim predict` at 1M and 10M synthetic requests.

Each size runs `servesim predict` in a fresh child process (small model, fast mode, every
output file written: requests.parquet, timeseries.parquet, prediction.json) and reports the
child's peak RSS (``ru_maxrss`` of the waited-for child), its CPU seconds and the size of
requests.parquet.  The run fails (exit 1) if a size's peak RSS exceeds ``--limit-gb``
(default 2 GB) or if requests.parquet does not hold every request.  Usage::

    python benchmarks/bench_memory.py                       # 1M and 10M
    python benchmarks/bench_memory.py --sizes 100000        # a quick check

Workload: Qwen3-8B on one H100 (SGLang, tp 1), Poisson arrivals at 200 requests/s, inputs
uniform on [20, 200] tokens, 2 output tokens each: short requests that the GPU keeps up with,
so the run's cost is in its number of requests, which is what this measures.  Column spill files go to the
temporary folder (TMPDIR; it must be on disk, not tmpfs, for their pages to leave memory).
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

import yaml

REPO = Path(__file__).resolve().parents[1]


def config(n: int, out: Path) -> dict:
    return {
        "seed": 1,
        "workload": {"kind": "synthetic", "num_requests": n, "arrival": {"process": "poisson", "rate": 200.0},
                     "input": {"dist": "uniform", "low": 20, "high": 200},
                     "output": {"dist": "fixed", "value": 2}},
        "deployment": {"model": "Qwen/Qwen3-8B", "gpu": "h100_sxm", "engine": "sglang", "workers": 1},
        "output": {"dir": str(out)},
        "simulation": {"mode": "fast"},
    }


def run(n: int, folder: Path) -> dict:
    cfg = folder / f"mem-{n}.yaml"
    out = folder / f"out-{n}"
    cfg.write_text(yaml.safe_dump(config(n, out)))
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "servesim.cli", "predict", str(cfg), "--quiet"], env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{n:,} requests: exit {proc.returncode}\n{proc.stderr}")
    import pyarrow.parquet as pq

    rows = pq.read_metadata(out / "requests.parquet").num_rows
    doc = json.loads((out / "prediction.json").read_text())
    return {
        "requests": n,
        "peak_rss_mb": after.ru_maxrss / 1024,  # the largest child so far: sizes run in increasing order
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "wall_s": wall,
        "parquet_rows": rows,
        "parquet_mb": (out / "requests.parquet").stat().st_size / 2**20,
        "completed": doc["summary"]["requests"]["completed"],
        "statistics": doc["summary"]["statistics"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--limit-gb", type=float, default=2.0)
    args = ap.parse_args()
    ok = True
    with tempfile.TemporaryDirectory(prefix="servesim-bench-memory-") as tmp:
        for n in sorted(args.sizes):
            r = run(n, Path(tmp))
            print(json.dumps(r), flush=True)
            if r["parquet_rows"] != n:
                print(f"FAIL: requests.parquet holds {r['parquet_rows']:,} rows, not {n:,}")
                ok = False
            if r["peak_rss_mb"] > args.limit_gb * 1024:
                print(f"FAIL: {n:,} requests peaked at {r['peak_rss_mb']:.0f} MB > {args.limit_gb} GB")
                ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
