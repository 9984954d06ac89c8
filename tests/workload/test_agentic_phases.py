"""AgentX's load phases (workload/agentic/phases.py, sim/agentic_phases.py): snapshot cuts,
primers and lane warm-ups before a barrier, the profile's admission window, grace and drain,
and the idle-wait caps.

Fixture ``phases.dag.jsonl``: play ``p`` has a main chain m0..m4 recorded at 0, 10, .., 40 s
(each extends the previous prompt and waits for its completion) and a subagent s0 (5 s), s1
(15 s); play ``q`` has a chain n0..n3 at 0, 20, 40, 60 s after its start.  Every pass takes
10 ms (``perf: fixed``) on one vLLM worker.
"""

from __future__ import annotations

import numpy as np
import pytest

from servesim.api import predict
from servesim.errors import ConfigError
from servesim.metrics.recorder import Status
from servesim.workload.agentic.formats import READERS
from servesim.workload.agentic.phases import SnapshotOptions, cut_play, draw_fractions, play_span, primer_nodes

from test_agentic_release import FIX, cfg

PHASES = FIX / "phases.dag.jsonl"
SPANS = {"p": 40.0, "q": 60.0}


def run(seed: int = 0, **agentic):
    c = cfg(PHASES, "servesim_dag", **{"arrival": "lanes", "lanes": 2, **agentic})
    c["seed"] = seed
    return predict(c)


def rows(p) -> dict[str, dict]:
    r = p.recorder
    cols = {k: r.column(k) for k in ("arrival", "finish", "input_length", "output_length", "status")}
    return {rid: {k: v[i] for k, v in cols.items()} | {"warmup": bool(r.is_warmup[i])}
            for i, rid in enumerate(r.request_id)}


# -- snapshot ---------------------------------------------------------------------------------
def test_cut_fractions_are_seeded_and_lie_in_the_window():
    opts = SnapshotOptions()
    a = draw_fractions(opts, 500, 7)
    assert a == draw_fractions(opts, 500, 7)
    assert a != draw_fractions(opts, 500, 8)
    assert min(a) >= 0.25 and max(a) <= 0.75 and max(a) - min(a) > 0.45  # spread over the window
    assert draw_fractions(SnapshotOptions(seed=3), 4, 7) == draw_fractions(SnapshotOptions(seed=3), 4, 99)
    wide = draw_fractions(SnapshotOptions(min_fraction=0.0, max_fraction=1.0), 500, 7)  # AIPerf's cut
    assert min(wide) < 0.05 and max(wide) > 0.95


def test_history_is_what_was_recorded_before_the_cut():
    g = READERS["servesim_dag"](PHASES, None)
    p = 0
    assert play_span(g, p) == 40.0
    snap = cut_play(g, p, 0.5)  # cut at 20 s: m0, m1 (10 s), s0 (5 s), s1 (15 s) ran before it
    assert snap.cut == 20.0
    assert {g.nodes[i].node_id for i in snap.history} == {"m0", "m1", "s0", "s1"}
    # one primer per conversation with history: its last historical node
    assert [g.nodes[i].node_id for i in primer_nodes(g, p, snap.history)] == ["m1", "s1"]


def test_initial_lanes_join_their_plays_at_a_seeded_cut():
    p = run(snapshot={})
    plays = p.plays
    first = {pid: k for k, pid in reversed(list(enumerate(plays["play_id"])))}
    for pid in ("p", "q"):
        k = first[pid]
        cut = plays["snapshot_cut_s"][k]
        assert 0.25 * SPANS[pid] <= cut <= 0.75 * SPANS[pid]
        assert plays["history"][k] > 0
        assert plays["outcome"][k] == "completed"  # history does not count as unsent
        assert plays["completed"][k] + plays["history"][k] == plays["nodes"][k]
    got = rows(p)
    # no history node is sent; the first live node of p waits for its floor from the cut
    k = first["p"]
    cut = plays["snapshot_cut_s"][k]
    live = [f"m{t}" for t in range(5) if 10.0 * t >= cut]
    assert all(f"m{t}" not in got for t in range(5) if 10.0 * t < cut)
    assert got[live[0]]["arrival"] == pytest.approx(10.0 * int(live[0][1:]) - cut)
    # the same seed gives the same cuts; another seed other cuts
    again = run(snapshot={})
    assert np.array_equal(again.plays["snapshot_cut_s"], plays["snapshot_cut_s"], equal_nan=True)
    other = run(seed=5, snapshot={})
    assert not np.array_equal(other.plays["snapshot_cut_s"][:2], plays["snapshot_cut_s"][:2])


# -- warm-up ----------------------------------------------------------------------------------
def test_primers_lane_warmups_and_the_barrier_before_measurement():
    p = run(snapshot={}, warmup={"requests_per_lane": 2})
    g = READERS["servesim_dag"](PHASES, None)
    got = rows(p)
    prim = {rid: v for rid, v in got.items() if "@primer" in rid}
    lane = {rid: v for rid, v in got.items() if "@warmup" in rid}
    measured = {rid: v for rid, v in got.items() if "@" not in rid}
    plays = p.plays
    cut_p = plays["snapshot_cut_s"][list(plays["play_id"]).index("p")]
    snap = cut_play(g, 0, cut_p / SPANS["p"])
    want = {g.nodes[i].node_id for i in primer_nodes(g, 0, snap.history)}
    assert {rid.split("@")[0] for rid in prim} >= want
    by_id = {n.node_id: n for n in g.nodes}
    for rid, v in prim.items():
        node = by_id[rid.split("@")[0]]
        assert v["output_length"] == 1 and v["input_length"] == node.input_length  # last historical full input
        assert v["arrival"] == 0.0 and v["warmup"]
    assert len(lane) == 4 and all(v["output_length"] == 1 and v["warmup"] for v in lane.values())
    assert min(v["arrival"] for v in lane.values()) >= max(v["finish"] for v in prim.values())
    for run_lane in ("p", "q"):  # a lane's warm-up requests run one after another
        mine = sorted((v["arrival"], v["finish"]) for rid, v in lane.items()
                      if by_id[rid.split("@")[0]].play == ("pq".index(run_lane)))
        assert mine[1][0] >= mine[0][1]
    barrier = max(v["finish"] for v in {**prim, **lane}.values())
    ph = p.summary["agentic"]["phases"]
    assert ph["measure_start_s"] == pytest.approx(barrier)
    assert min(v["arrival"] for v in measured.values()) >= barrier
    assert not any(v["warmup"] for v in measured.values())
    # warm-up is out of the metrics: counted apart, not in the measured completions or plays
    req = p.summary["requests"]
    assert req["warmup"] == len(prim) + len(lane) == ph["primers"] + ph["lane_warmups"]
    assert req["completed_measured"] == len(measured)
    assert p.summary["latency"]["ttft_ms"]["count"] == len(measured)
    assert p.summary["agentic"]["nodes"]["completed"] == len(measured)


def test_warmup_copies_are_marked_in_the_request_columns():
    p = run(snapshot={}, warmup={"requests_per_lane": 1})
    extra = p.stats.agentic.request_columns(p.recorder.size)
    for rid, cause, warm in zip(p.recorder.request_id, extra["released_by"], p.recorder.is_warmup):
        assert warm == ("@" in rid)
        if "@primer" in rid:
            assert cause == "primer"
        elif "@warmup" in rid:
            assert cause == "warmup"


# -- profile ----------------------------------------------------------------------------------
def test_no_admission_after_the_cutoff_and_every_node_counted():
    p = run(profile={"duration_s": 50.0, "play_idle_cap_s": None, "client_idle_cap_s": None})
    got = rows(p)
    ph = p.summary["agentic"]["phases"]
    assert ph["admission_cutoff_s"] == 50.0
    assert max(v["arrival"] for v in got.values()) <= 50.0
    assert ph["not_issued_after_cutoff"] > 0  # plays recycled until the cutoff, cut short there
    n = p.summary["agentic"]["nodes"]
    assert n["unsent"] >= ph["not_issued_after_cutoff"]
    assert sum(n[k] for k in ("history", "completed", "rejected", "unfinished", "cancelled", "skipped",
                              "unsent")) == n["nodes"]
    assert set(p.plays["outcome"]) >= {"completed", "incomplete"}


def test_grace_cancels_what_is_still_in_flight(tmp_path):
    long = tmp_path / "long.dag.jsonl"  # a 3,000-token answer: 30 s of decode
    long.write_text('{"id": "x", "play": "p", "input_length": 32, "output_length": 3000, "start_s": 0}\n')
    c = cfg(long, "servesim_dag", arrival="lanes", lanes=1,
            profile={"duration_s": 5.0, "grace_s": 2.0, "drain_s": 1.0})
    p = predict(c)
    r = p.recorder
    assert r.size == 1
    assert int(r.column("status")[0]) == int(Status.CANCELLED)
    assert float(r.column("finish")[0]) == pytest.approx(7.0, abs=0.011)  # at the grace deadline's pass end
    ph = p.summary["agentic"]["phases"]
    assert (ph["grace_deadline_s"], ph["drain_deadline_s"]) == (7.0, 8.0)
    assert ph["cancelled_at_grace"] == 1 and not ph["drain_timed_out"]
    assert p.summary["requests"]["cancelled"] == 1
    assert p.plays["cancelled"][0] == 1 and p.plays["outcome"][0] == "incomplete"


def test_a_response_within_the_grace_completes(tmp_path):
    long = tmp_path / "long.dag.jsonl"  # 300 tokens: ends at 3 s, after the 2 s cutoff, within the grace
    long.write_text('{"id": "x", "play": "p", "input_length": 32, "output_length": 300, "start_s": 0}\n')
    p = predict(cfg(long, "servesim_dag", arrival="lanes", lanes=1, profile={"duration_s": 2.0, "grace_s": 5.0}))
    assert int(p.recorder.column("status")[0]) == int(Status.COMPLETED)
    assert p.summary["agentic"]["phases"]["cancelled_at_grace"] == 0


@pytest.mark.parametrize("caps,gap", [({"play_idle_cap_s": None, "client_idle_cap_s": None}, 20.0),
                                      ({"play_idle_cap_s": 7.0, "client_idle_cap_s": None}, 7.0),
                                      ({}, 10.0),  # the defaults: 300 s in a play, 10 s client-wide
                                      ({"play_idle_cap_s": 3.0, "client_idle_cap_s": 5.0}, 3.0)])
def test_idle_waits_are_capped(tmp_path, caps, gap):
    two = tmp_path / "two.dag.jsonl"  # b is recorded 20 s after a; a ends at 0.02 s
    two.write_text('{"id": "a", "play": "p", "input_length": 32, "output_length": 2, "start_s": 0}\n'
                   '{"id": "b", "play": "p", "input_length": 32, "output_length": 2, "start_s": 20, '
                   '"deps": [{"id": "a"}]}\n')
    p = predict(cfg(two, "servesim_dag", arrival="lanes", lanes=1, profile={"duration_s": 1000.0, **caps}))
    got = rows(p)
    assert got["b"]["arrival"] == pytest.approx(0.02 + gap if gap < 20 else 20.0)
    cp = {k: p.plays[k][0] for k in ("makespan_s", "cp_tool_s", "cp_other_delay_s", "cp_floor_s")}
    assert cp["makespan_s"] == pytest.approx(got["b"]["finish"])


def test_the_client_cap_waits_while_another_lane_is_busy(tmp_path):
    """The client-wide cap applies only when nothing at all is in flight."""
    t = tmp_path / "t.dag.jsonl"  # play p: a, then b 20 s later; play q: one 2,500-token answer (25 s)
    t.write_text('{"id": "a", "play": "p", "input_length": 32, "output_length": 2, "start_s": 0}\n'
                 '{"id": "b", "play": "p", "input_length": 32, "output_length": 2, "start_s": 20, '
                 '"deps": [{"id": "a"}]}\n'
                 '{"id": "z", "play": "q", "input_length": 32, "output_length": 2500, "start_s": 0}\n')
    p = predict(cfg(t, "servesim_dag", arrival="lanes", lanes=2, profile={"duration_s": 1000.0}))
    assert rows(p)["b"]["arrival"] == pytest.approx(20.0)  # z is in flight: no client-wide idle gap


# -- determinism, defaults, errors -----------------------------------------------------------
def test_same_seed_same_output_with_every_phase():
    opts = dict(snapshot={}, warmup={}, profile={"duration_s": 200.0})
    a, b = run(**opts), run(**opts)
    assert a.recorder.request_id == b.recorder.request_id
    for col in ("arrival", "finish", "status", "cached_tokens"):
        assert np.array_equal(a.recorder.column(col), b.recorder.column(col), equal_nan=True)
    for k, v in a.plays.items():
        assert (v == b.plays[k]) if isinstance(v, list) else np.array_equal(v, b.plays[k], equal_nan=True), k
    assert a.summary["agentic"] == b.summary["agentic"]


def test_phases_off_keeps_the_plain_lanes_run():
    p = run()
    assert "phases" not in p.summary["agentic"]
    assert np.isnan(p.plays["snapshot_cut_s"]).all() and not p.plays["history"].any()
    assert not p.recorder.is_warmup.any()


@pytest.mark.parametrize("agentic,words", [
    ({"arrival": "trace", "snapshot": {}}, "snapshot apply to arrival 'lanes'"),
    ({"arrival": "lanes", "lanes": 1, "warmup": {}}, "set snapshot too"),
    ({"arrival": "lanes", "lanes": 1, "snapshot": {}, "warmup": {}, "warmup_plays": 1}, "set one of them"),
    ({"arrival": "lanes", "lanes": 1, "profile": {}, "duration_s": 5}, "leave duration_s unset"),
    ({"arrival": "lanes", "lanes": 1, "snapshot": {"min_fraction": 0.8, "max_fraction": 0.2}},
     "snapshot.min_fraction (0.8) must not exceed snapshot.max_fraction (0.2)"),
    ({"arrival": "lanes", "lanes": 1, "profile": {"grace": 3}}, "grace"),
    ({"arrival": "lanes", "lanes": 1, "profile": {"duration_s": 0}}, "duration_s"),
])
def test_bad_phase_options_name_the_key(agentic, words):
    with pytest.raises(ConfigError) as exc:
        predict(cfg(PHASES, "servesim_dag", **agentic))
    assert words in str(exc.value)
