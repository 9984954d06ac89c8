"""SGLang: a request that ends at its prefill frees room, so a queue held back as 'batch full' moves on."""

from __future__ import annotations

from servesim.engines.base import EngineLimits
from servesim.engines.sglang.scheduler import SGLangEngine
from servesim.engines.sglang.options import SGLangOptions
from servesim.metrics.recorder import RequestRecorder, Status
from simharness import make_request


def test_queue_moves_after_requests_end_at_prefill():
    # KV of 1,700 tokens.  Requests 0 (1 + 1 token) and 1 (745 + 1) are admitted; request 2
    # needs 752 + 200 = 952 but only 1700 - 2 - 746 = 952 are left (admission needs more):
    # the batch is full.  Both admitted requests end with their prefill (one output token),
    # nothing runs, and request 2 must be admitted next instead of the engine going idle.
    reqs = [make_request(0, 0.0, 1, 1, block_size=64), make_request(1, 0.0, 745, 1, block_size=64),
            make_request(2, 0.0, 752, 200, block_size=64)]
    rec = RequestRecorder()
    for r in reqs:
        rec.register(r.index, r.request_id, None, 0, r.input_length, r.output_length, False)
    eng = SGLangEngine(0, rec, EngineLimits(1700, 4096), SGLangOptions(max_prefill_tokens=2048), None)
    for r in reqs:
        eng.add_request(r, 0.0)
    now = 0.0
    first = eng.schedule(now)
    assert first.prefill_new.tolist() == [1, 745]
    now += 0.01
    eng.complete(first, now)
    plan = eng.schedule(now)
    assert plan is not None and plan.prefill_new.tolist() == [752]
    while plan is not None:
        now += 0.01
        eng.complete(plan, now)
        eng.check_invariants()
        plan = eng.schedule(now)
    assert (rec.column("status") == Status.COMPLETED).all()
