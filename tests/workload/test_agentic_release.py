"""Agentic workloads end to end: hand-computed release times of fixture plays, floors, fan-out
and join, failure, terminal-state accounting and byte-identical plays.parquet.

Every pass takes exactly 10 ms (``perf: fixed``) on one vLLM worker, so a request alone on
the worker with output length O finishes ``O x 10 ms`` after its release (the first pass
prefills and emits the first token)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest

from servesim.api import predict
from servesim.metrics.plays import PATH_PARTS
from servesim.metrics.recorder import Status

FIX = Path(__file__).parent / "agentic_fixtures"


def cfg(path: Path, fmt: str, mode: str = "fast", **agentic) -> dict:
    w = {"kind": "trace", "format": fmt, "path": str(path)}
    if agentic:
        w["agentic"] = agentic
    return {"seed": 0, "workload": w, "simulation": {"mode": mode},
            "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "engine": {"name": "vllm"}},
            "perf": {"model": "fixed", "seconds": 0.01}, "output": {"dir": None}}


def times(p) -> dict[str, tuple[float, float]]:
    r = p.recorder
    return {r.request_id[i]: (float(r.column("arrival")[i]), float(r.column("finish")[i])) for i in range(r.size)}


# a at 0 (2 tokens, ends 0.02); b1 = a's completion + 0.5 (3 tokens); b2 = + 1.0 (5 tokens);
# c joins b1 and b2 + 0.1: the slower b2 (ends 1.07) releases it at 1.17; d follows a's dispatch
# but its floor (12 s - the play's 10 s start) holds it to 2.0.
FANOUT = {"a": (0.0, 0.02), "b1": (0.52, 0.55), "b2": (1.02, 1.07), "c": (1.17, 1.18), "d": (2.0, 2.01)}


@pytest.mark.parametrize("fmt,name", [("servesim_dag", "fanout.dag.jsonl"), ("agentic_mooncake", "v2.jsonl")])
@pytest.mark.parametrize("mode", ["fast", "step"])
def test_fanout_join_waits_for_the_slowest_subagent_and_a_floor_holds_a_node(fmt, name, mode):
    p = predict(cfg(FIX / name, fmt, mode))
    got = times(p)
    assert set(got) == set(FANOUT)
    for rid, (arr, fin) in FANOUT.items():
        assert got[rid] == pytest.approx((arr, fin), abs=1e-9), rid
    plays = p.plays
    assert list(plays["outcome"]) == ["completed"]
    assert plays["makespan_s"][0] == pytest.approx(2.01)
    assert plays["final_request_id"] == ["c"]  # the last answer of the root's session
    assert plays["cp_path"] == ["d"] and plays["cp_floor_s"][0] == pytest.approx(2.0)


def test_without_floors_the_dispatch_dependency_releases_at_once():
    p = predict(cfg(FIX / "fanout.dag.jsonl", "servesim_dag", floors=False))
    got = times(p)
    assert got["d"] == pytest.approx((0.0, 0.01))  # a's dispatch, shared first pass
    assert got["c"] == pytest.approx((1.17, 1.18))
    plays = p.plays
    assert plays["makespan_s"][0] == pytest.approx(1.18)
    # The critical path: a (completion) -> 1.0 s tool wait -> b2 (completion) -> 0.1 s -> c.
    assert plays["cp_path"] == ["a > b2 > c"]
    parts = {k: plays[f"cp_{k}_s"][0] for k in PATH_PARTS}
    assert parts["tool"] == pytest.approx(1.0) and parts["other_delay"] == pytest.approx(0.1)
    assert parts["prefill"] == pytest.approx(0.03) and parts["decode"] == pytest.approx(0.05)
    assert sum(parts.values()) == pytest.approx(plays["makespan_s"][0], abs=1e-12)


def test_agentic_mooncake_v1_plays_are_dependency_components():
    p = predict(cfg(FIX / "v1.jsonl", "agentic_mooncake"))
    got = times(p)
    # r1 waits delay + tool_wait_ms = 500 ms after r0 ends; r3 joins r1 and r2 (+100 ms);
    # q0 is a play of its own, 500 ms after the first.
    want = {"r0": (0.0, 0.02), "r1": (0.52, 0.55), "r2": (1.02, 1.07), "r3": (1.17, 1.18), "q0": (0.5, 0.51)}
    for rid, v in want.items():
        assert got[rid] == pytest.approx(v, abs=1e-9), rid
    assert sorted(p.plays["play_id"]) == ["q0", "r0"]
    assert p.summary["agentic"]["plays_completed"] == 2


def test_gzip_trace_reads_the_same(tmp_path):
    gz = tmp_path / "fanout.dag.jsonl.gz"
    with open(FIX / "fanout.dag.jsonl", "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert times(predict(cfg(gz, "servesim_dag"))) == times(predict(cfg(FIX / "fanout.dag.jsonl", "servesim_dag")))


def _failing_play(tmp_path: Path) -> Path:
    rows = [
        '{"id": "a", "play": "p", "input_length": 100, "output_length": 2, "hash_ids": [1,2,3,4,5,6,7]}',
        # longer than the model's context: rejected, which fails the play
        '{"id": "big", "play": "p", "input_length": 200000, "output_length": 2, '
        '"deps": [{"id": "a", "delay_s": 0.1}]}',
        '{"id": "after_big", "play": "p", "input_length": 16, "output_length": 1, "deps": [{"id": "big"}]}',
        '{"id": "late", "play": "p", "input_length": 16, "output_length": 1, "deps": [{"id": "a", "delay_s": 5}]}',
        '{"id": "x", "play": "q", "input_length": 16, "output_length": 3, "start_s": 0.0}',
    ]
    path = tmp_path / "fail.jsonl"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_a_rejected_node_fails_its_play_and_skips_what_was_not_sent(tmp_path):
    p = predict(cfg(_failing_play(tmp_path), "servesim_dag"))
    plays = p.plays
    by_id = {pid: k for k, pid in enumerate(plays["play_id"])}
    k = by_id["p"]
    assert plays["outcome"][k] == "failed"
    assert (plays["completed"][k], plays["rejected"][k], plays["skipped"][k], plays["unsent"][k]) == (1, 1, 2, 0)
    assert plays["outcome"][by_id["q"]] == "completed"  # other plays are not affected
    assert p.recorder.size == 3  # a, big, x: the skipped nodes were never sent
    s = p.summary["agentic"]
    assert (s["plays_completed"], s["plays_failed"], s["plays_incomplete"]) == (1, 1, 0)
    n = s["nodes"]
    assert n["completed"] + n["rejected"] + n["unfinished"] + n["skipped"] + n["unsent"] == n["nodes"] == 5


def test_time_limit_leaves_plays_incomplete_and_every_node_counted_once(tmp_path):
    c = cfg(FIX / "fanout.dag.jsonl", "servesim_dag")
    c["simulation"]["max_sim_time_s"] = 0.6
    p = predict(c)
    plays = p.plays
    assert list(plays["outcome"]) == ["incomplete"]
    st = p.recorder.column("status")
    assert set(st.tolist()) <= {int(Status.COMPLETED), int(Status.UNFINISHED)}
    total = sum(int(plays[k][0]) for k in ("completed", "rejected", "unfinished", "skipped", "unsent"))
    assert total == plays["nodes"][0] == 5


def test_identical_runs_write_byte_identical_plays_parquet(tmp_path):
    outs = []
    for k in range(2):
        p = predict(cfg(FIX / "fanout.dag.jsonl", "servesim_dag"))
        outs.append(p.write(tmp_path / f"run{k}"))
    a, b = ((o / "plays.parquet").read_bytes() for o in outs)
    assert a == b
    import pyarrow.parquet as pq

    req = pq.read_table(outs[0] / "requests.parquet").to_pydict()
    assert req["released_by"] == ["floor", "a completion", "a completion", "b2 completion", "floor"]
    assert req["depends_on"][3] == "b1,b2" and req["agent"][1] == "explore"


def test_lanes_recycle_plays_with_fresh_cache_identities():
    p = predict(cfg(FIX / "v1.jsonl", "agentic_mooncake", arrival="lanes", lanes=1, duration_s=3.0))
    plays = p.plays
    # one lane: plays run one after another, wrapping to copies until the 3 s admission deadline
    assert list(plays["lane"]) == [0] * len(plays["lane"])
    assert list(plays["generation"][:3]) == [0, 0, 1]
    starts, ends = plays["first_dispatch_s"], plays["end_s"]
    assert np.all(starts[1:] >= ends[:-1] - 1e-12)
    r = p.recorder
    first_copy = [i for i in range(r.size) if r.request_id[i] == "r0#1"]
    assert first_copy and r.column("cached_tokens")[first_copy[0]] == 0  # fresh identities: nothing cached


# Weka: the main agent's first request (0 -> 0.02); a background subagent (recorded at +0.7 s,
# spawned 0.2 s after that request ended); a blocking one (recorded at +1.0 s, 3 tokens) that
# joins, 0.6 s after its end, the main agent's next request (recorded at +2.0 s, 1.5 s of
# tool time after the first).
WEKA_FLOORS = {"play1/0": (0.0, 0.02), "play1/sa2/0": (0.7, 0.71), "play1/sa1/0": (1.0, 1.03),
               "play1/3": (2.0, 2.01)}
WEKA_NO_FLOORS = {"play1/0": (0.0, 0.02), "play1/sa2/0": (0.22, 0.23), "play1/sa1/0": (0.52, 0.55),
                  "play1/3": (1.52, 1.53)}


@pytest.mark.parametrize("floors,want", [(True, WEKA_FLOORS), (False, WEKA_NO_FLOORS)])
def test_weka_play_lowering_and_release(floors, want):
    p = predict(cfg(FIX / "weka.jsonl", "weka", floors=floors))
    got = times(p)
    assert set(got) == set(want)
    for rid, v in want.items():
        assert got[rid] == pytest.approx(v, abs=1e-9), rid
    plays = p.plays
    assert plays["recorded_makespan_s"][0] == pytest.approx(2.3)
    assert plays["slowdown"][0] == pytest.approx((2.01 if floors else 1.53) / 2.3)
    assert p.summary["agentic"]["plays_completed"] == 1


def test_applied_compute_agentic_turns_follow_tool_latency():
    # turn 0: 1000 tokens, 3 out (0 -> 0.03); turn 1 at 0.53: 1000+3+500 tokens, 2 out (-> 0.55);
    # final at 1.55: + 2 + 200 tokens, 4 out (-> 1.59)
    p = predict(cfg(FIX / "trie.jsonl", "applied_compute_agentic", arrival="lanes", lanes=1))
    got = times(p)
    want = {"line1/0": (0.0, 0.03), "line1/1": (0.53, 0.55), "line1/2": (1.55, 1.59)}
    for rid, v in want.items():
        assert got[rid] == pytest.approx(v, abs=1e-9), rid
    inp = dict(zip(p.recorder.request_id, p.recorder.column("input_length")))
    assert (inp["line1/0"], inp["line1/1"], inp["line1/2"]) == (1000, 1503, 1705)
    cached = dict(zip(p.recorder.request_id, p.recorder.column("cached_tokens")))
    assert cached["line1/1"] >= 992 and cached["line1/2"] >= 1488  # the previous context, in 16-token blocks


def test_applied_compute_agentic_needs_lanes_or_a_rate():
    from servesim.errors import ConfigError

    with pytest.raises(ConfigError, match="has no timestamps"):
        predict(cfg(FIX / "trie.jsonl", "applied_compute_agentic"))


def test_warmup_plays_run_but_are_left_out_of_the_metrics():
    p = predict(cfg(FIX / "v1.jsonl", "agentic_mooncake", arrival="lanes", lanes=1, warmup_plays=1))
    plays = p.plays
    assert list(plays["warmup"]) == [True, False]
    a = p.summary["agentic"]
    assert (a["plays"], a["warmup_plays"], a["nodes"]["nodes"]) == (1, 1, 1)  # q0 alone is measured
    r = p.recorder
    warm = dict(zip(r.request_id, r.is_warmup))
    assert warm["r0"] and warm["r3"] and not warm["q0"]
    assert p.summary["requests"]["warmup"] == 4


def test_disaggregated_play_splits_its_critical_path_with_the_kv_transfer():
    c = cfg(FIX / "fanout.dag.jsonl", "servesim_dag", floors=False)
    c["deployment"]["disaggregation"] = {"prefill": {"workers": 1}, "decode": {"workers": 1}, "link_gbs": 1.0}
    p = predict(c)
    plays = p.plays
    assert list(plays["outcome"]) == ["completed"]
    parts = {k: plays[f"cp_{k}_s"][0] for k in PATH_PARTS}
    assert parts["kv_transfer"] > 0
    assert sum(parts.values()) == pytest.approx(plays["makespan_s"][0], abs=1e-12)
    # the join still waits for the slower subagent
    assert p.recorder.column("arrival")[list(p.recorder.request_id).index("c")] > \
        p.recorder.column("finish")[list(p.recorder.request_id).index("b2")]


@pytest.mark.parametrize("mode", ["fast", "step"])
def test_first_token_dependency_releases_on_the_source_first_token(tmp_path, mode):
    path = tmp_path / "ft.jsonl"
    path.write_text(
        '{"id": "a", "input_length": 100, "output_length": 5}\n'
        '{"id": "x", "input_length": 16, "output_length": 1, "deps": [{"id": "a", "on": "first_token", "delay_s": 0.1}]}\n')
    p = predict(cfg(path, "servesim_dag", mode))
    got = times(p)
    assert got["a"] == pytest.approx((0.0, 0.05))
    assert got["x"][0] == pytest.approx(0.11)  # a's first token at 0.01, plus 0.1 s
    assert list(p.plays["cp_path"]) == ["a > x"]
    assert p.plays["cp_prefill_s"][0] == pytest.approx(0.01 + 0.01)  # a up to its first token, then x
    assert p.plays["cp_decode_s"][0] == pytest.approx(0.0) and p.plays["cp_other_delay_s"][0] == pytest.approx(0.1)


def test_belady_eviction_is_refused_for_agentic_workloads():
    from servesim.errors import ConfigError

    c = cfg(FIX / "fanout.dag.jsonl", "servesim_dag")
    c["deployment"]["engine"]["eviction_policy"] = "belady"
    with pytest.raises(ConfigError, match="belady"):
        predict(c)


def test_aiperf_dag_spawns_join_and_forks_continue_the_context():
    # root/0 (0 -> 0.02) spawns helper-a (4 tokens: 0.02 -> 0.06) and helper-b (6: 0.02 -> 0.08, then
    # 0.5 s later its 2nd turn: 0.58 -> 0.60); root/1 waits for both helpers (the spawns' default join)
    # and its own 0.2 s delay: max(0.22, 0.06, 0.60) = 0.60 -> 0.63.  solo starts 1 s into its play
    # and forks solo-cont, which carries solo's context.
    p = predict(cfg(FIX / "aiperf.dag.jsonl", "dag_jsonl"))
    got = times(p)
    want = {"root/0": (0.0, 0.02), "helper-a/0": (0.02, 0.06), "helper-b/0": (0.02, 0.08),
            "helper-b/1": (0.58, 0.60), "root/1": (0.60, 0.63), "solo/0": (1.0, 1.01), "solo-cont/0": (1.01, 1.03)}
    for rid, v in want.items():
        assert got[rid] == pytest.approx(v, abs=1e-9), rid
    assert sorted(p.plays["play_id"]) == ["root", "solo"]
    r = p.recorder
    inp = dict(zip(r.request_id, r.column("input_length")))
    assert inp["solo-cont/0"] > inp["solo/0"] + 1  # solo's prompt and answer, then its own message
    assert inp["helper-a/0"] < inp["root/0"]  # a spawn starts from its own messages


# Dynamo request trace (agentic_fixtures/dynamo.jsonl, ms after the trace's first request):
# m0 (main, 0-100 recorded, 2 tokens); c0 (child session 'sub', received 300, recorded 10 ms,
# 3 tokens) follows m0 200 ms after m0's recorded end; m1 (main, received 1000) follows m0 and
# joins c0 (the child ended at 310, before m1 started) 690 ms after c0's recorded end; c1
# (child 'bg', received 1005, after m1 started) follows m1 with no delay (m1 ended at 1010)
# and joins nothing; o0 is a second play's root at 2000.
# Floors on: c0's floor (0.3) holds it past m0's end + 0.2 (0.22); m1 waits for c0's
# simulated end (0.33) + 0.69 = 1.02, past its floor of 1.0.  Floors off: c0 at 0.22, m1 at
# 0.25 + 0.69.
DYNAMO_FLOORS = {"m0": (0.0, 0.02), "c0": (0.3, 0.33), "m1": (1.02, 1.03), "c1": (1.03, 1.05), "o0": (2.0, 2.01)}
DYNAMO_NO_FLOORS = {"m0": (0.0, 0.02), "c0": (0.22, 0.25), "m1": (0.94, 0.95), "c1": (0.95, 0.97),
                    "o0": (2.0, 2.01)}


@pytest.mark.parametrize("floors,want", [(True, DYNAMO_FLOORS), (False, DYNAMO_NO_FLOORS)])
@pytest.mark.parametrize("mode", ["fast", "step"])
def test_dynamo_request_trace_lowering_and_release(floors, want, mode):
    p = predict(cfg(FIX / "dynamo.jsonl", "dynamo", mode, floors=floors))
    got = times(p)
    assert set(got) == set(want)
    for rid, v in want.items():
        assert got[rid] == pytest.approx(v, abs=1e-9), rid
    plays = p.plays
    assert list(plays["play_id"]) == ["main", "other"]
    assert list(plays["outcome"]) == ["completed", "completed"]
    assert plays["recorded_makespan_s"][0] == pytest.approx(1.025)
    assert p.summary["agentic"]["plays_completed"] == 2
