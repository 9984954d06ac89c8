"""Shared set-up of the ``servesim serve`` tests: a small deployment served on loopback."""

from __future__ import annotations

import contextlib

import pytest
import yaml

pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")

from servesim.serve.server import serve_process  # noqa: E402 (after the skips)


def serve_config(engine: str = "vllm", workers: int = 1, **deployment) -> dict:
    """An 8B model on H100, engine-only timing (no calibration: the comparison with offline
    runs then needs no frontend)."""
    dep = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "engine": {"name": engine},
           "tp": 1, "workers": workers, "router": "round_robin"}
    dep.update(deployment)
    return {"seed": 0, "deployment": dep, "perf": {"model": "analytic", "calibration": None},
            "workload": {"kind": "synthetic", "num_requests": 1, "arrival": {"process": "poisson", "rate": 1.0},
                         "input": {"dist": "fixed", "value": 100}, "output": {"dist": "fixed", "value": 10}}, "output": {"dir": None}}



@contextlib.contextmanager
def served_process(config: dict, tmp_path, *args: str):
    """``servesim serve`` on ``config`` in its own process; yields its URL."""
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    with serve_process(path, *args) as url:
        yield url
