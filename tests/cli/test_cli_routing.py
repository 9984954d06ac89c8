"""Routers through the whole pipeline on the Mooncake conversation trace."""

from __future__ import annotations

import pytest

import servesim
from conftest import shared_file


def run(trace, router: str, **extra):
    cfg = {
        "workload": {"kind": "trace", "path": str(trace), "limit": 3000},
        "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "workers": 8,
                       "router": router, **extra},
        "output": {"dir": None},
    }
    return servesim.predict(cfg).summary


def test_kv_aware_routing_beats_round_robin_on_reuse_and_ttft():
    trace = shared_file("traces", "mooncake_conversation.jsonl")
    rr = run(trace, "round_robin")
    kv = run(trace, "kv_aware")
    assert rr["requests"]["completed"] == kv["requests"]["completed"] == 3000
    assert kv["cache"]["prefix_reuse_ratio"] > 1.5 * rr["cache"]["prefix_reuse_ratio"]
    assert kv["latency"]["ttft_ms"]["mean"] < rr["latency"]["ttft_ms"]["mean"]


def test_unknown_router_option_names_the_key(tmp_path):
    with pytest.raises(servesim.errors.ConfigError, match="deployment.router_options"):
        servesim.predict({
            "workload": {"kind": "synthetic", "num_requests": 5, "arrival": {"rate": 1.0},
                         "input": {"dist": "fixed", "value": 100}, "output": {"dist": "fixed", "value": 5}},
            "deployment": {"router": "least_loaded", "router_options": {"bogus": 1}, "workers": 2},
            "output": {"dir": None},
        })
