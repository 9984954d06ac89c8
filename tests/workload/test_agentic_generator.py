"""Synthetic agent plays: contexts grow by answers and tool outputs, subagents fan out and join,
every node ends once, the critical path adds up, fast mode equals step mode."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from servesim.api import predict
from servesim.config import load_config
from servesim.metrics.plays import PATH_PARTS
from servesim.workload.agentic.generator import generate_agentic

BASE = {
    "seed": 5,
    "client": "api-server",  # a frontend with a stream latency: the critical path's last part
    "workload": {
        "kind": "agentic", "plays": 12, "block_size": 64, "system_prompt": 2048,
        "task": {"dist": "uniform", "low": 200, "high": 800},
        "turns": {"dist": "uniform", "low": 3, "high": 6},
        "output": {"dist": "uniform", "low": 20, "high": 120},
        "tool_output": {"dist": "uniform", "low": 100, "high": 600},
        "tool_latency_s": {"dist": "uniform", "low": 0.1, "high": 1.0},
        "subagents": {"probability": 0.5, "fanout": {"dist": "uniform", "low": 2, "high": 3},
                      "turns": {"dist": "uniform", "low": 1, "high": 3}, "task": {"dist": "fixed", "value": 300},
                      "background": 0.3},
        "compaction": {"threshold": 3500, "summary": 500},
        "agentic": {"arrival": "lanes", "lanes": 4},
    },
    "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "workers": 2,
                   "engine": {"name": "vllm"}},
    "output": {"dir": None},
}


def test_turns_extend_the_previous_prompt_and_answer():
    g = generate_agentic(load_config(BASE).workload, 5)
    assert len(g.plays) == 12
    nodes = {n.node_id: n for n in g.nodes}
    a, b = nodes["play0/main/0"], nodes["play0/main/1"]
    assert a.hash_ids[:32] == b.hash_ids[:32]  # the system prompt's 32 blocks, shared
    assert b.input_length > a.input_length + a.output_length or b.input_length == 2048 + 500  # grown, or compacted
    sysblocks = {n.hash_ids[:32] for n in g.nodes}
    assert len(sysblocks) == 1  # every play and subagent starts from the same system prompt
    joins = [d for n in g.nodes for d in n.deps if d.relation == "join"]
    spawns = [d for n in g.nodes for d in n.deps if d.relation == "spawn"]
    assert spawns and joins and len(joins) < len(spawns)  # some subagents run in the background
    compacted = [n for n in g.nodes if n.agent == "main" and n.turn > 0 and n.input_length == 2048 + 500]
    assert compacted  # contexts past 3,500 tokens restart from a summary


def test_every_node_one_state_and_critical_path_adds_up():
    p = predict(BASE)
    plays = p.plays
    assert set(plays["outcome"]) == {"completed"}
    total = sum(plays[k] for k in ("completed", "rejected", "unfinished", "skipped", "unsent"))
    assert np.array_equal(total, plays["nodes"])
    assert int(plays["nodes"].sum()) == p.recorder.size
    split = sum(plays[f"cp_{k}_s"] for k in PATH_PARTS)
    np.testing.assert_allclose(split, plays["makespan_s"], rtol=0, atol=1e-9)
    for k in PATH_PARTS:
        assert (plays[f"cp_{k}_s"] >= -1e-9).all(), k
    assert plays["peak_fanout"].max() >= 2
    a = p.summary["agentic"]
    assert a["ideal_prefix_reuse"] >= a["prefix_reuse"] > 0.3
    # At most 4 plays at once (lanes), each lane's plays one after another: a lane is freed when
    # the server ends the play's last request (the frontend's stream latency comes after).
    d = p.stats.agentic
    server_end = np.array([max(d.server_times[r][1] for r in run.request if r >= 0) for run in d.runs])
    assert (plays["end_s"] - server_end >= 0).all() and plays["cp_stream_s"].max() > 0
    for lane in range(4):
        mine = plays["lane"] == lane
        s, e = plays["first_dispatch_s"][mine], server_end[mine]
        assert mine.sum() >= 2 and (s[1:] >= e[:-1] - 1e-12).all()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_fast_mode_equals_step_mode(engine):
    c = copy.deepcopy(BASE)
    c["workload"]["plays"] = 6
    c["deployment"]["engine"] = {"name": engine}
    res = []
    for mode in ("fast", "step"):
        c["simulation"] = {"mode": mode}
        p = predict(c)
        res.append((p.recorder.column("finish").copy(), p.plays["makespan_s"].copy(), list(p.recorder.request_id)))
    assert res[0][2] == res[1][2]
    np.testing.assert_allclose(res[0][0], res[1][0], rtol=1e-9)
    np.testing.assert_allclose(res[0][1], res[1][1], rtol=1e-9)


def test_agentic_config_errors():
    from servesim.errors import ConfigError

    c = copy.deepcopy(BASE)
    c["workload"]["agentic"] = {"arrival": "trace"}
    with pytest.raises(ConfigError, match="generated plays have no timestamps"):
        load_config(c)
    c["workload"]["agentic"] = {"arrival": "lanes"}
    with pytest.raises(ConfigError, match="needs lanes"):
        load_config(c)


def _cache_run(router: str, memory: float) -> dict:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from agentic_cache_check import config

    return predict(config("vllm", router, memory, plays=12, lanes=8)).summary["agentic"]


def test_kv_aware_routing_and_a_larger_cache_raise_reuse_and_lower_makespan():
    # 12 plays on 8 lanes fit a 35% cache almost whole (makespans within 0.1%); at 30% of the GPU's
    # memory the cache holds a few contexts per worker, so its size decides what is recomputed
    rr_small, kv_small, kv_large = (_cache_run("round_robin", 0.3), _cache_run("kv_aware", 0.3),
                                    _cache_run("kv_aware", 0.9))
    assert kv_small["prefix_reuse"] > rr_small["prefix_reuse"] + 0.05
    assert kv_small["makespan_s"]["mean"] < rr_small["makespan_s"]["mean"]
    assert kv_large["prefix_reuse"] > kv_small["prefix_reuse"]
    assert kv_large["makespan_s"]["mean"] < kv_small["makespan_s"]["mean"]
