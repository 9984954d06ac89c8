"""Sweeps: a known optimum recovered by grid, random and TPE search; infeasible candidates
filtered before simulation; resuming; NSGA-II; the candidates table's contract."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from servesim.api import predict
from servesim.plan.results import JOURNAL
from servesim.plan.sweep import run_sweep

WORKERS = [1, 2, 3, 4, 5, 6]


def results(rows: list[dict]) -> list[dict]:
    """Rows without ``host_s`` (the wall time a candidate took where it ran)."""
    return [{k: v for k, v in r.items() if k != "host_s"} for r in rows]


def _spec(**kw) -> dict:
    spec = {"parameters": {"deployment.workers": WORKERS}, "executor": {"jobs": 1}, "choose": "gpus", "out": None}
    spec.update(kw)
    return spec


@pytest.fixture(scope="module")
def optimum() -> int:
    """The smallest worker count meeting the TTFT SLO, found by running each by hand."""
    from tests.plan.conftest import BASE

    for w in WORKERS:
        s = predict(BASE, [f"deployment.workers={w}"]).summary
        if s["slo"]["met"] and not s["overload"]["overloaded"]:
            return w
    raise AssertionError("no worker count meets the SLO")


def test_the_case_has_an_inner_optimum(optimum):
    assert 1 < optimum < WORKERS[-1]  # not a corner: the search has something to find


@pytest.mark.parametrize("search,trials", [("grid", None), ("random", 6), ("tpe", 10)])
def test_search_recovers_the_smallest_worker_count(base, optimum, search, trials):
    res = run_sweep(base, spec=_spec(search=search, trials=trials, seed=1), out=None)
    assert res.chosen is not None
    assert res.chosen["params"]["deployment.workers"] == optimum
    assert res.chosen["gpus"] == optimum


def test_infeasible_candidates_are_filtered_with_the_reason(base, tmp_path):
    spec = _spec(parameters={"deployment.tp": [1, 3], "deployment.model": ["meta-llama/Llama-3.1-8B-Instruct",
                                                                            "meta-llama/Llama-3.1-70B-Instruct"]},
                 gpu_budget=2)
    res = run_sweep(base, spec=spec, out=tmp_path / "s")
    by = {(r["params"]["deployment.tp"], "70B" if "70B" in r["params"]["deployment.model"] else "8B"): r
          for r in res.rows}
    assert by[(1, "8B")]["status"] == "ok"
    assert by[(3, "8B")]["status"] == "infeasible" and "does not divide" in by[(3, "8B")]["reason"]
    assert by[(1, "70B")]["status"] == "infeasible" and "does not fit" in by[(1, "70B")]["reason"]
    assert res.ran == 1  # only the feasible candidate was simulated
    budget = run_sweep(base, spec=_spec(parameters={"deployment.workers": [2, 3]}, gpu_budget=2), out=None)
    over = [r for r in budget.rows if r["params"]["deployment.workers"] == 3][0]
    assert over["status"] == "infeasible" and "budget" in over["reason"] and over["gpus"] == 3


def test_table_contract(base, tmp_path):
    out = tmp_path / "sweep"
    spec = _spec(parameters={"deployment.workers": [2, 3], "deployment.engine.name": ["sglang", "vllm"]})
    run_sweep(base, spec=spec, out=out)
    t = pq.read_table(out / "candidates.parquet").to_pylist()
    assert len(t) == 4
    cols = set(t[0])
    for c in ("candidate", "status", "reason", "param.deployment.workers", "param.deployment.engine.name", "gpus",
              "throughput_per_gpu_tok_s", "per_user_tok_s", "goodput_rps", "goodput_tok_s", "slo_attainment",
              "cost_per_hour_usd", "cost_per_mtok_usd", "ttft_p90_ms", "tpot_p90_ms", "pareto"):
        assert c in cols, c
    assert [r["candidate"] for r in t] == [0, 1, 2, 3]
    assert all(r["status"] == "ok" and r["reason"] == "" for r in t)
    assert any(r["pareto"] for r in t)
    for r in t:  # per-user tokens/s is 1 / mean TPOT; cost is GPUs x the bundled H100 price
        assert r["cost_per_hour_usd"] == pytest.approx(6.73 * r["gpus"])
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["status"] == "done" and doc["spec"]["parameters"]
    assert doc["chosen"]["config"]["deployment"]["workers"] == doc["chosen"]["params"]["deployment.workers"]


def test_pareto_front_by_hand():
    from servesim.plan.pareto import THROUGHPUT_FRONT, pareto_front

    rows = [{"status": "ok", "throughput_per_gpu_tok_s": a, "per_user_tok_s": b}
            for a, b in [(10, 1), (8, 2), (7, 1.5), (5, 5), (5, 4)]]
    rows.append({"status": "failed"})
    assert pareto_front(rows, THROUGHPUT_FRONT) == [True, True, False, True, False, False]


def test_interrupted_sweep_resumes_where_it_stopped(base, tmp_path):
    spec = _spec(parameters={"deployment.workers": [1, 2, 3, 4]})
    full = run_sweep(base, spec=spec, out=tmp_path / "full")
    out = tmp_path / "cut"
    first = run_sweep(base, spec=spec, out=out)
    lines = (out / JOURNAL).read_text().splitlines()
    (out / JOURNAL).write_text("\n".join(lines[:2]) + "\n" + lines[2][:20])  # stopped while writing the third
    resumed = run_sweep(base, spec=spec, out=out)
    assert resumed.ran == 2  # the two finished candidates were not simulated again
    assert results(resumed.rows) == results(full.rows) == results(first.rows)
    assert pq.read_table(out / "candidates.parquet").equals(pq.read_table(tmp_path / "full" / "candidates.parquet"))
    other = dict(spec, parameters={"deployment.workers": [1, 2]})
    from servesim.errors import ConfigError

    with pytest.raises(ConfigError, match="different sweep"):
        run_sweep(base, spec=other, out=out)


def test_nsga2_and_the_process_pool(base):
    spec = _spec(parameters={"deployment.workers": [1, 2, 3], "deployment.engine.name": ["sglang", "vllm"]},
                 search="nsga2", trials=8, seed=0, executor={"jobs": 2})
    a = run_sweep(base, spec=spec, out=None)
    assert 1 <= len(a.rows) <= 8 and all(r["status"] == "ok" for r in a.rows)
    assert any(r["pareto"] for r in a.rows)
    b = run_sweep(base, spec=dict(spec, executor={"jobs": 1}), out=None)
    assert results(a.rows) == results(b.rows)  # same seed: same candidates and results on either executor


def test_fill_budget_compares_layouts_at_a_fixed_gpu_count(base):
    spec = _spec(parameters={"deployment.tp": [1, 2, 4, 8]}, gpu_budget=4, fill_budget=True, require_slo=False)
    res = run_sweep(base, spec=spec, out=None)
    by_tp = {r["params"]["deployment.tp"]: r for r in res.rows}
    assert [by_tp[tp]["gpus"] for tp in (1, 2, 4)] == [4, 4, 4]
    assert [by_tp[tp]["set"] for tp in (1, 2, 4)] == [{"deployment.workers": n} for n in (4, 2, 1)]
    assert by_tp[8]["status"] == "infeasible" and "one worker needs 8 GPUs" in by_tp[8]["reason"]
    from servesim.plan.sweep import chosen_config

    assert chosen_config(res)["deployment"]["workers"] * chosen_config(res)["deployment"]["tp"] == 4
