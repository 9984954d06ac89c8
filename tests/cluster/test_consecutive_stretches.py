"""A vLLM worker that holds consecutive decode stretches as one (``decode_stretch_plan``, while a
waiting request stays blocked) gives the results of one stretch at a time, bit for bit.

An agentic workload on one worker keeps a blocked waiting head most of the time, and so do
check_identical's small-KV vLLM configurations (on the analytic step time, whose compiled
pricer the worker needs; one with a scheduler overhead, which prices a lone pass differently).  The run is
made twice: as it is, and with the worker's pricer wrapped so that it offers no
``stretches`` (then every stretch is planned and committed on its own, as before).  Every
per-request column and the summary (busy time, gaps, passes) must agree; only the number of
simulation events falls.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import servesim.cluster.worker as worker_module
from servesim.api import predict
from servesim.compiled import compiled_module

pytestmark = pytest.mark.skipif(compiled_module("perf._stretch_core") is None,
                                reason="compiled stretch pricer not built or switched off")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_agentic import MODEL, agentx_workload  # noqa: E402


def _agentic() -> dict:
    return {"seed": 3, "workload": agentx_workload(16, 0.5),
            "deployment": {"model": MODEL, "gpu": "h100_sxm", "workers": 1, "engine": {"name": "vllm"}},
            "output": {"dir": None}}


def _small(name: str, overhead: bool) -> dict:
    """benchmarks/check_identical.py's configuration ``name`` (a KV cache small enough for
    waiting requests to block) on the analytic step time, with a scheduler overhead or not."""
    from check_identical import configs

    cfg = configs()[name]()
    cfg["perf"] = {"model": "analytic"}
    if overhead:
        cfg["perf"]["frontend"] = {"scheduler_pass_s": 3.1e-4, "scheduler_per_request_s": 2.3e-6}
    return cfg


def _run(monkeypatch, cfg: dict, one_at_a_time: bool):
    if one_at_a_time:
        real = worker_module.stretch_pricer

        def plain(model):
            pricer = real(model)
            return None if pricer is None else (lambda ctx, steps, now: pricer(ctx, steps, now))

        monkeypatch.setattr(worker_module, "stretch_pricer", plain)
    pred = predict(cfg)
    monkeypatch.undo()
    return pred


@pytest.mark.parametrize("case", ["agentic", "vllm-small", "vllm-small+overhead", "vllm-nocache-small"])
def test_consecutive_stretches_change_nothing(monkeypatch, case):
    if case == "agentic":
        cfg = _agentic
    else:
        name, _, extra = case.partition("+")
        cfg = lambda: _small(name, extra == "overhead")  # noqa: E731
    a = _run(monkeypatch, cfg(), False)
    b = _run(monkeypatch, cfg(), True)
    assert a.recorder.size == b.recorder.size > 0
    for name in a.recorder.cols:
        x, y = a.recorder.column(name), b.recorder.column(name)
        assert x.tobytes() == y.tobytes(), name
    sa, sb = dict(a.summary), dict(b.summary)
    ra, rb = dict(sa.pop("run")), dict(sb.pop("run"))
    assert ra.pop("events") < rb.pop("events")  # the point: fewer events
    assert ra == rb
    assert repr(sa) == repr(sb)
