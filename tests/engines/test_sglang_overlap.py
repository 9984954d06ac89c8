"""SGLang's overlap event loop (engines/sglang_overlap.py): each pass is chosen while the
previous one runs, so arrivals are pulled one pass later and a finished batch decodes once more."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from servesim.engines.base import EngineLimits
from servesim.engines.sglang import SGLangEngine
from servesim.engines.sglang_options import SGLangOptions
from servesim.engines.sglang_overlap import OverlapLag
from servesim.metrics.recorder import RequestRecorder, Status
from servesim.perf.simple import FixedStepTime, LinearStepTime
from tests.engines.test_attention_dp import dp_engine, simulate
from tests.simharness import make_request, run

STEP = 0.01


def sglang(overlap: bool = True, capacity: int = 200_000, chunk: int | None = 8192, **opts):
    options = SGLangOptions(disable_overlap_schedule=not overlap, **opts)

    def factory(wid, rec):
        return SGLangEngine(wid, rec, EngineLimits(capacity, 131072), options, chunk)

    return factory


def first_tokens(overlap: bool, reqs, **kw):
    rec, ws = run(sglang(overlap, **kw), copy.deepcopy(reqs), step=STEP)
    assert (rec.column("status") == Status.COMPLETED).all()
    return rec.column("first_token"), ws


def test_arrival_during_a_pass_waits_for_the_pass_already_chosen():
    # r0 decodes from 0.01 until 0.40; r1 arrives at 0.051, during the decode pass [0.05, 0.06].
    # Normal loop: pulled at 0.06, prefilled [0.06, 0.07].  Overlap loop: the pass [0.06, 0.07]
    # was chosen at 0.05, before r1 arrived; r1 is pulled at 0.06 for the pass [0.07, 0.08].
    reqs = [make_request(0, 0.0, 100, 40), make_request(1, 0.051, 100, 3)]
    normal, _ = first_tokens(False, reqs)
    overlap, _ = first_tokens(True, reqs)
    assert normal[1] == pytest.approx(0.07)
    assert overlap[1] == pytest.approx(0.08)


def test_arrival_during_a_prefill_waits_too():
    # r0's long prefill [0, 0.01]; r1 arrives at 0.005: the overlap loop chose [0.01, 0.02] (r0's
    # first decode) when r0's prefill started; r1 is prefilled in [0.02, 0.03].
    reqs = [make_request(0, 0.0, 4000, 10), make_request(1, 0.005, 100, 3)]
    normal, _ = first_tokens(False, reqs)
    overlap, _ = first_tokens(True, reqs)
    assert normal[1] == pytest.approx(0.02)
    assert overlap[1] == pytest.approx(0.03)


def test_idle_scheduler_takes_an_arrival_at_once():
    # After r0 is done (and its extra decode pass), the loop spins: r1 at 1.0 is prefilled at once.
    reqs = [make_request(0, 0.0, 100, 3), make_request(1, 1.0, 100, 3)]
    overlap, _ = first_tokens(True, reqs)
    assert overlap[1] == pytest.approx(1.01)


def test_finished_batch_decodes_once_more_and_delays_the_next_prefill():
    # r0: prefill [0, .01] (token 1), decodes end at .02, .03 (token 3, finished).  The overlap
    # loop chose the pass [.03, .04] at .02, when r0 still ran: a decode of r0 whose token is
    # discarded.  r1, arriving at .03 when r0 finished (a closed-loop client's next request),
    # is prefilled after it: [.04, .05].  The normal loop prefills r1 in [.03, .04].
    reqs = [make_request(0, 0.0, 100, 3), make_request(1, 0.03, 100, 3)]
    normal, wn = first_tokens(False, reqs)
    overlap, wo = first_tokens(True, reqs)
    assert normal[1] == pytest.approx(0.04)
    assert overlap[1] == pytest.approx(0.05)
    # passes: 3 + 3 (normal); 3 + ghost + 3 + ghost (overlap)
    assert wn[0].passes == 6 and wo[0].passes == 8


def test_ghost_pass_emits_nothing_and_keeps_the_kv_accounts():
    rec = RequestRecorder()
    eng = sglang(True)(0, rec)
    req = make_request(0, 0.0, 100, 2)
    rec.register(0, "r0", None, 0, 100, 2, False)
    eng.add_request(req, 0.0)
    t, kinds = 0.0, []
    while eng.has_work():
        plan = eng.schedule(t)
        assert plan is not None
        kinds.append("prefill" if plan.prefill_new.size else "decode")
        t += STEP
        eng.complete(plan, t)
        eng.check_invariants()
    assert kinds == ["prefill", "decode", "decode"]  # the last one: r0 once more, discarded
    assert rec.column("generated")[0] == 2
    assert rec.column("last_token")[0] == pytest.approx(0.02)
    assert eng.schedule(t) is None and not eng.has_work()


def test_lag_cutoff_rules():
    lag = OverlapLag()
    assert lag.cutoff(1.0) == 1.0  # nothing in flight: everything seen
    lag.decided(1.0, True)
    lag.ended(1.5)
    assert lag.cutoff(1.5) == 1.0  # at the end of the pass: arrivals up to its start
    assert lag.cutoff(2.0) == 2.0  # after an idle gap: everything
    lag.decided(1.5, False)
    assert lag.cutoff(1.5) == 1.5


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fast_mode_matches_step_mode_with_overlap(seed):
    rng = np.random.default_rng(seed)
    reqs, t = [], 0.0
    for i in range(80):
        t += float(rng.exponential(0.03))
        reqs.append(make_request(i, t, int(rng.integers(50, 3000)), int(rng.integers(1, 200)), block_size=512))
    st = LinearStepTime(base_s=0.004, per_prefill_token_s=2e-7, per_decode_request_s=3e-5, per_context_token_s=1e-8)
    slow, _ = run(sglang(True, capacity=30_000), copy.deepcopy(reqs), step_time=st, fast=False)
    fast, _ = run(sglang(True, capacity=30_000), copy.deepcopy(reqs), step_time=st, fast=True)
    for c in ("first_token", "last_token", "generated", "status"):
        assert np.allclose(slow.column(c), fast.column(c), rtol=1e-9, atol=0), c


def test_dp_attention_idle_rank_pulls_in_lock_step():
    # Two ranks, round robin: r0 on rank 0 decodes; r1 (rank 1, idle) arrives at 0.051 during the
    # pass [0.05, 0.06].  Rank 1 joined that pass with an idle batch and chose its next one at
    # 0.05 too, so r1 is prefilled in [0.07, 0.08], as on a busy rank; with the normal loop, in
    # [0.06, 0.07].
    reqs = [make_request(0, 0.0, 100, 40), make_request(1, 0.051, 100, 3)]
    out = {}
    for overlap in (False, True):
        rec, _eng, _w = simulate(lambda r: dp_engine("sglang", r, disable_overlap_schedule=not overlap),
                                 copy.deepcopy(reqs), FixedStepTime(STEP), fast=False)
        out[overlap] = rec.column("first_token")[1]
    assert out[False] == pytest.approx(0.07)
    assert out[True] == pytest.approx(0.08)
