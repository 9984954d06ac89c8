"""Whole runs on the compiled parts equal whole runs on their Python versions.

Each compiled part has its own equality test; this one checks they add up: the same
synthetic workload (shared prefixes, multi-turn sessions, analytic pricing) through each
engine, with a dense model and a sliding-window one, gives identical per-request columns
and inter-token gaps with the compiled parts on and off (``python_versions``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from servesim.api import predict
from servesim.compiled import FROM_SOURCE, MODULES, PURE_PYTHON_ENV, compiled_module, describe, runs_compiled
from simharness import python_versions

pytestmark = pytest.mark.skipif(any(compiled_module(m) is None for m in MODULES), reason="compiled core not built")

COLUMNS = ("first_scheduled", "first_token", "second_token", "last_token", "finish", "emissions", "generated",
           "cached_tokens", "status", "worker")


def test_setup_reads_the_one_list_of_compiled_parts():
    """setup.py builds what compiled_parts.py lists, and keeps no second list."""
    root = Path(__file__).resolve().parents[1]
    setup_py = (root / "setup.py").read_text()
    assert "compiled_parts.py" in setup_py
    assert not any(f'"{name}"' in setup_py for name in MODULES + FROM_SOURCE)
    src = root / "src" / "servesim"
    for name in MODULES:
        assert (src / f"{name.replace('.', '/')}.pyx").is_file(), name
    for name in FROM_SOURCE:
        assert (src / f"{name.replace('.', '/')}.py").is_file(), name


def test_python_versions_rebinds_functions_bound_at_import():
    from servesim.engines.sglang import scheduler as sglang
    from servesim.engines.blockkv import manager
    from servesim.kvcache import radix_cache, segments
    from servesim.workload import request

    compiled = (sglang.sequence_units, manager.sequence_units, radix_cache.common_prefix)
    with python_versions():
        assert sglang.sequence_units is manager.sequence_units is request.python_sequence_units
        assert radix_cache.common_prefix is segments.PYTHON_VERSIONS["common_prefix"]
    assert (sglang.sequence_units, manager.sequence_units, radix_cache.common_prefix) == compiled
    assert sglang.sequence_units is not request.python_sequence_units


def test_describe_names_the_switch():
    """The switch is read once, at import, so the Python run is a separate process."""
    assert describe() == f"compiled parts: all {len(MODULES) + len(FROM_SOURCE)} in use"
    said = subprocess.run([sys.executable, "-c", "from servesim.compiled import describe; print(describe())"],
                          check=True, capture_output=True, text=True, env={**os.environ, PURE_PYTHON_ENV: "1"})
    assert said.stdout.strip() == f"compiled parts: off ({PURE_PYTHON_ENV} is set)"


def config(engine: str, model: str) -> dict:
    """Shared system prompts and multi-turn sessions (later turns reuse earlier answers' blocks)."""
    return {
        "seed": 3,
        "workload": {"kind": "synthetic", "num_requests": 400, "arrival": {"process": "poisson", "rate": 12.0},
                     "input": {"dist": "uniform", "low": 500, "high": 3000},
                     "output": {"dist": "uniform", "low": 50, "high": 400},
                     "prefix": {"num_groups": 8, "length": 1024, "share": 0.6},
                     "sessions": {"turns": {"dist": "uniform", "low": 1, "high": 3},
                                  "think_time_s": {"dist": "exponential", "mean": 2.0},
                                  "new_input": {"dist": "uniform", "low": 50, "high": 300}}},
        "deployment": {"model": model, "gpu": "h100_sxm", "workers": 2, "engine": {"name": engine}},
        "output": {"dir": None, "timeseries": False},
    }


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
@pytest.mark.parametrize("model", ["meta-llama/Llama-3.1-8B-Instruct", "openai/gpt-oss-20b"])
def test_compiled_run_equals_python_run(engine: str, model: str) -> None:
    with python_versions():
        ref = predict(config(engine, model)).recorder
    fast = predict(config(engine, model)).recorder
    assert int(fast.column("cached_tokens").sum()) > 0  # the prefix caches were exercised
    for name in COLUMNS:
        assert np.array_equal(ref.column(name), fast.column(name), equal_nan=True), name
    for a, b in ((ref.itl, fast.itl), (ref.itl_warmup, fast.itl_warmup)):
        (va, wa), (vb, wb) = a.arrays(), b.arrays()
        assert va.tobytes() == vb.tobytes() and wa.tolist() == wb.tolist()


#: Runs through the modules compiled from source: SGLang driving the radix cache through every
#: path (LRU with a loose pool; LFU and Belady under memory pressure, with evictions and
#: retractions; FIFO with pages and a host tier: evicted paths written back, host hits
#: loaded), vLLM with and without memory pressure (preemptions), and TensorRT-LLM under both
#: capacity policies (MAX_UTILIZATION under memory pressure: pauses) and with chunked context.
SOURCE_CASES = {
    "sglang-lru": {"name": "sglang", "schedule_policy": "lpm"},
    "sglang-lfu-tight": {"name": "sglang", "mem_fraction_static": 0.25, "eviction_policy": "lfu"},
    "sglang-belady-tight": {"name": "sglang", "mem_fraction_static": 0.25, "eviction_policy": "belady"},
    "sglang-fifo-paged-host": {"name": "sglang", "mem_fraction_static": 0.25, "eviction_policy": "fifo",
                               "page_size": 16, "host_kv_gb": 16},
    "vllm": {"name": "vllm"},
    "vllm-tight": {"name": "vllm", "gpu_memory_utilization": 0.3},
    "trtllm": {"name": "trtllm"},
    "trtllm-maxutil-tight-chunked": {"name": "trtllm", "capacity_scheduler_policy": "MAX_UTILIZATION",
                                     "free_gpu_memory_fraction": 0.12, "enable_chunked_context": True,
                                     "max_num_tokens": 2048},
}

_RUN_CASE = """
import json, sys
import numpy as np
from servesim.api import predict
from servesim.compiled import FROM_SOURCE, runs_compiled
cfg, out = json.loads(sys.argv[1]), sys.argv[2]
rec = predict(cfg).recorder
np.savez(out, **{name: rec.column(name) for name in json.loads(sys.argv[3])}, itl=rec.itl.arrays()[0])
print({runs_compiled(n) for n in FROM_SOURCE})
"""


def source_config(engine: dict) -> dict:
    cfg = config(engine["name"], "meta-llama/Llama-3.1-8B-Instruct")
    cfg["deployment"] = dict(cfg["deployment"], engine=engine)
    return cfg


@pytest.mark.skipif(not all(runs_compiled(name) for name in FROM_SOURCE), reason="modules from source not compiled")
@pytest.mark.parametrize("case", sorted(SOURCE_CASES))
def test_modules_compiled_from_source_equal_their_source(case: str, tmp_path: Path) -> None:
    """The switch is read at import, so the Python run is a separate process."""
    cfg = source_config(SOURCE_CASES[case])
    runs = {}
    for label, env in (("compiled", {}), ("source", {PURE_PYTHON_ENV: "1"})):
        out = tmp_path / f"{label}.npz"
        used = subprocess.run([sys.executable, "-c", _RUN_CASE, json.dumps(cfg), str(out), json.dumps(COLUMNS)],
                              check=True, capture_output=True, text=True, env={**os.environ, **env}).stdout.strip()
        assert used == str({label == "compiled"})  # every module compiled, or every one from source
        runs[label] = dict(np.load(out))
    assert int(runs["compiled"]["cached_tokens"].sum()) > 0
    for name, col in runs["compiled"].items():
        assert col.tobytes() == runs["source"][name].tobytes(), name
