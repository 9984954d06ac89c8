"""kv_events.jsonl: the stream of blocks each worker's cache stored and removed."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

import servesim

CFG = {
    "seed": 5,
    "workload": {
        "kind": "synthetic", "num_requests": 200,
        "arrival": {"process": "poisson", "rate": 15.0},
        "input": {"dist": "uniform", "low": 300, "high": 4000},
        "output": {"dist": "uniform", "low": 5, "high": 150},
        "prefix": {"num_groups": 4, "length": 1024, "share": 0.7},
    },
    "deployment": {"workers": 2},
    "output": {"kv_events": True},
}


@pytest.mark.parametrize("engine", [{"name": "sglang", "mem_fraction_static": 0.25},
                                    {"name": "vllm", "gpu_memory_utilization": 0.3}, {"name": "trtllm"}])
def test_event_stream_replays_to_the_final_cache_contents(tmp_path, engine):
    cfg = dict(CFG, deployment=dict(CFG["deployment"], engine=engine))
    pred = servesim.predict(cfg)
    out = pred.write(tmp_path)
    rows = [json.loads(line) for line in (out / "kv_events.jsonl").read_text().splitlines()]
    assert rows and {r["kind"] for r in rows} <= {"stored", "removed"}
    times = [r["time"] for r in rows]
    assert times == sorted(times)
    held = defaultdict(int)
    for r in rows:
        held[r["worker"]] += r["tokens"] if r["kind"] == "stored" else -r["tokens"]
    for w in pred.stats.workers:
        eng = w.engine
        if hasattr(eng, "tree"):
            cached = eng.tree.total_size
        else:
            cached = eng.pool.num_cached_blocks * eng.bs
        assert held[w.worker_id] == cached
