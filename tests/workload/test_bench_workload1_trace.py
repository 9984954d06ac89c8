"""The simulator benchmark's workload-1 trace (benchmarks/bench_simulator.py) is workload 1.

Both servesim and AISimulate replay this file in the speed comparison, so it must have the
issue's arrival rate, length ranges and prefix sharing, and servesim must read it as a trace.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from benchscripts import load_benchmark
from servesim.workload.config import parse_workload
from servesim.workload.source import build_source


def test_workload1_trace_has_the_issue_distributions(tmp_path: Path) -> None:
    bench = load_benchmark("bench_simulator")
    path = tmp_path / "w1.jsonl"
    n = 4000
    bench.write_workload1_trace(n, path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == n
    t = np.array([r["timestamp"] for r in rows]) / 1000.0
    assert np.all(np.diff(t) >= 0)
    assert abs(n / t[-1] - 8.0) < 0.4  # Poisson 8 requests/s
    isl = np.array([r["input_length"] for r in rows])
    osl = np.array([r["output_length"] for r in rows])
    assert isl.min() >= 1000 and isl.max() <= 4000 and abs(isl.mean() - 2500) < 50
    assert osl.min() >= 200 and osl.max() <= 1000 and abs(osl.mean() - 600) < 15
    # 60% open with one of 64 prefixes: blocks (2g, 2g + 1), ids below 128; the rest unique
    prefixed = [r for r in rows if r["hash_ids"][0] < 128]
    assert abs(len(prefixed) / n - 0.6) < 0.03
    assert all(r["hash_ids"][:2] == [r["hash_ids"][0], r["hash_ids"][0] + 1] and r["hash_ids"][0] % 2 == 0
               for r in prefixed)
    assert len({r["hash_ids"][0] for r in prefixed}) == 64
    rest = [b for r in rows for b in (r["hash_ids"][2:] if r["hash_ids"][0] < 128 else r["hash_ids"])]
    assert len(rest) == len(set(rest)) and min(rest) >= 128
    assert all(len(r["hash_ids"]) == -(-r["input_length"] // 512) for r in rows)
    # servesim replays it as a Mooncake trace
    src = build_source(parse_workload({"kind": "trace", "path": str(path), "block_size": 512}), 0, None)
    reqs = list(src.requests())
    assert len(reqs) == n and reqs[5].input_length == rows[5]["input_length"]


def test_workload1_in_process_run_completes_every_request(capsys) -> None:
    """``--workload1 N`` (the in-process run timed in paired comparisons) simulates all N."""
    bench = load_benchmark("bench_simulator")
    assert bench.run_workload1(200, "vllm") == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["requests"] == out["completed"] == 200 and out["cpu_s"] > 0
