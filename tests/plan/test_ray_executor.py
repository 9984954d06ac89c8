"""Same seeds give identical candidate rows on local Ray and on the local process pool."""

from __future__ import annotations

import pytest

from servesim.plan.sweep import run_sweep
from tests.plan.test_sweep import results

pytest.importorskip("ray")


def test_ray_and_process_pool_give_identical_rows(base, tmp_path):
    spec = {"parameters": {"deployment.tp": [1, 3]}, "out": None}  # Ray's start-up dominates: keep it small
    local = run_sweep(base, spec=dict(spec, executor={"kind": "local", "jobs": 2}), out=None)
    on_ray = run_sweep(base, spec=dict(spec, executor={"kind": "ray", "jobs": 2}), out=None)  # local Ray: no address
    assert [r["status"] for r in on_ray.rows] == ["ok", "infeasible"]
    assert results(on_ray.rows) == results(local.rows)
    assert all(r["host_s"] > 0 for r in on_ray.rows if r["status"] == "ok")  # ran on Ray, timed there
