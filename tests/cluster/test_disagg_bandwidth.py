"""Behaviour: on the Mooncake conversation trace, a faster KV link lowers TTFT."""

from __future__ import annotations

import servesim
from tests.conftest import shared_file


def _run(trace, link_gbs: float) -> dict:
    cfg = {
        "seed": 0,
        "workload": {"kind": "trace", "path": str(trace), "limit": 1500},
        "deployment": {
            "model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "engine": {"name": "sglang"},
            "router": "least_loaded",
            "disaggregation": {"prefill": {"workers": 4}, "decode": {"workers": 2},
                               "link_gbs": link_gbs, "link_latency_us": 20.0},
        },
        "output": {"dir": None},
    }
    return servesim.predict(cfg).summary


def test_higher_link_bandwidth_lowers_ttft():
    trace = shared_file("traces", "mooncake_conversation.jsonl")
    slow = _run(trace, 5.0)
    fast = _run(trace, 50.0)
    for s in (slow, fast):
        assert s["requests"]["total"] == 1500
        assert s["requests"]["unfinished"] == 0
    assert slow["requests"]["completed"] == fast["requests"]["completed"]
    t_slow = slow["latency"]["ttft_ms"]["mean"]
    t_fast = fast["latency"]["ttft_ms"]["mean"]
    # ~130 kB of KV per token, prompts of ~10k tokens: at 5 GB/s a transfer takes ~0.3 s
    # and the decode workers' inbound links queue; at 50 GB/s they hardly do.
    assert t_fast < 0.8 * t_slow
