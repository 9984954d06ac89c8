"""Shared set-up of the ``servesim serve`` tests: a small deployment served on loopback."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys

import pytest
import yaml

pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")


def serve_config(engine: str = "vllm", workers: int = 1, **deployment) -> dict:
    """An 8B model on H100, engine-only timing (no calibration: the comparison with offline
    runs then needs no frontend)."""
    dep = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "engine": {"name": engine},
           "tp": 1, "workers": workers, "router": "round_robin"}
    dep.update(deployment)
    return {"seed": 0, "deployment": dep, "perf": {"model": "analytic", "calibration": None},
            "workload": {"kind": "synthetic", "num_requests": 1, "arrival": {"process": "poisson", "rate": 1.0},
                         "input": {"dist": "fixed", "value": 100}, "output": {"dist": "fixed", "value": 10}}, "output": {"dir": ""}}


@contextlib.contextmanager
def served_process(config: dict, tmp_path, *args: str):
    """``servesim serve`` in its own process (its own interpreter, as a user runs it); yields its URL."""
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.Popen([sys.executable, "-m", "servesim.cli", "serve", str(path), "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        match = re.search(r"(http://[^ ]+)/v1", line)
        if match is None:
            proc.kill()
            raise AssertionError(f"servesim serve did not start: {line!r} {proc.stderr.read()}")
        yield match.group(1)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
