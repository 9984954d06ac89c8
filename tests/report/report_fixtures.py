"""Small run folders and a sweep folder for the report tests, written once per test session.

Not a conftest.py: the suite imports helpers as top-level modules (``from conftest import
shared_file``), which a second conftest.py would shadow.  Test modules import the fixture.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import servesim

RUN = {
    "seed": 1,
    "workload": {"kind": "synthetic", "num_requests": 240, "arrival": {"process": "poisson", "rate": 8.0},
                 "input": {"dist": "lognormal", "median": 1200, "sigma": 0.6, "max": 12000},
                 "output": {"dist": "lognormal", "median": 120, "sigma": 0.5, "max": 800},
                 "prefix": {"num_groups": 4, "length": 512, "share": 0.6}},
    "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "engine": {"name": "sglang"},
                   "workers": 2},
}


def write_run(folder: Path, **deployment) -> Path:
    cfg = json.loads(json.dumps(RUN))
    cfg["deployment"].update(deployment)
    servesim.predict(cfg).write(folder)
    return folder


def write_sweep(folder: Path) -> Path:
    """A sweep folder in the shape `servesim sweep` writes: candidates.parquet and sweep.json."""
    folder.mkdir(parents=True, exist_ok=True)
    n = 6
    cols = {
        "candidate": np.arange(n, dtype=np.int64),
        "status": ["ok", "ok", "ok", "ok", "infeasible", "failed"],
        "reason": ["", "", "", "", "does not fit by 12.0 GB", "simulation error"],
        "param.deployment.tp": np.array([1, 2, 4, 8, 1, 2], dtype=np.int64),
        "param.deployment.engine.name": ["sglang", "sglang", "vllm", "vllm", "trtllm", "trtllm"],
        "gpus": np.array([1, 2, 4, 8, 1, 2], dtype=np.int64),
        "throughput_per_gpu_tok_s": [2400.0, 2100.0, 1500.0, 900.0, np.nan, np.nan],
        "per_user_tok_s": [20.0, 35.0, 30.0, 80.0, np.nan, np.nan],
        "goodput_rps": [3.0, 4.0, 3.5, 5.0, np.nan, np.nan],
        "goodput_tok_s": [900.0, 1200.0, 1000.0, 1500.0, np.nan, np.nan],
        "slo_attainment": [0.7, 0.9, 0.85, 0.99, np.nan, np.nan],
        "cost_per_hour_usd": [3.0, 6.0, 12.0, 24.0, np.nan, np.nan],
        "cost_per_mtok_usd": [0.35, 0.79, 2.2, 7.4, np.nan, np.nan],
        "ttft_p90_ms": [900.0, 400.0, 500.0, 150.0, np.nan, np.nan],
        "tpot_p90_ms": [50.0, 28.0, 33.0, 12.0, np.nan, np.nan],
        "pareto": [True, True, False, True, False, False],
    }
    pq.write_table(pa.table(cols), folder / "candidates.parquet")
    (folder / "sweep.json").write_text(json.dumps({"base_config": "base.yaml", "candidates": n,
                                                   "swept": ["deployment.tp", "deployment.engine.name"]}))
    return folder


_BUILT: dict[str, Path] = {}


@pytest.fixture(scope="session")
def report_inputs(tmp_path_factory) -> dict[str, Path]:
    if not _BUILT:  # each importing module registers the fixture anew; build the folders once
        base = tmp_path_factory.mktemp("report_inputs")
        _BUILT.update(sglang=write_run(base / "sglang"), vllm=write_run(base / "vllm", engine={"name": "vllm"}),
                      sweep=write_sweep(base / "sweep"))
    return _BUILT
