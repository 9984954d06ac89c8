"""Property tests: random workloads through the SGLang engine keep KV accounting exact."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.engines.base import EngineLimits
from servesim.engines.sglang.scheduler import SGLangEngine
from servesim.engines.sglang.options import SGLangOptions
from servesim.metrics.recorder import RequestRecorder, Status
from simharness import make_request

request_st = st.tuples(
    st.floats(0, 2.0),                # arrival
    st.integers(1, 1500),             # input
    st.integers(1, 200),              # output
    st.integers(0, 3),                # shared prefix group
    st.integers(0, 3),                # shared prefix blocks
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    reqs=st.lists(request_st, min_size=1, max_size=25),
    capacity=st.integers(1700, 6000),
    page=st.sampled_from([1, 16]),
    chunk=st.sampled_from([None, 256, 1024]),
    policy=st.sampled_from(["fcfs", "lpm"]),
    disable=st.booleans(),
)
def test_random_workloads_conserve_kv_and_terminate_once(reqs, capacity, page, chunk, policy, disable):
    block = 64
    requests = []
    for i, (arr, inp, out, group, shared) in enumerate(sorted(reqs)):
        n_blocks = -(-inp // block)
        ids = [10_000 * (i + 1) + b for b in range(n_blocks)]
        for b in range(min(shared, n_blocks)):
            ids[b] = 100 * group + b
        requests.append(make_request(i, arr, inp, out, hash_ids=ids, block_size=block))
    rec = RequestRecorder()
    for r in requests:
        rec.register(r.index, r.request_id, None, 0, r.input_length, r.output_length, False)
    opts = SGLangOptions(page_size=page, schedule_policy=policy, disable_radix_cache=disable,
                         max_prefill_tokens=2048)
    eng = SGLangEngine(0, rec, EngineLimits(capacity, 4096), opts, chunk)
    now, nxt, passes = 0.0, 0, 0
    while nxt < len(requests) or eng.has_work():
        while nxt < len(requests) and requests[nxt].arrival <= now:
            rec.arrived(nxt, now)
            eng.add_request(requests[nxt], now)
            nxt += 1
        plan = eng.schedule(now)
        eng.check_invariants()
        if plan is None:
            assert nxt < len(requests), "engine idle with work left"
            now = requests[nxt].arrival
            continue
        now += 0.01
        eng.complete(plan, now)
        eng.check_invariants()
        passes += 1
        assert passes < 20_000
    status = rec.column("status")
    assert (status != Status.PENDING).all()
    done = status == Status.COMPLETED
    generated, wanted = rec.column("generated"), rec.column("output_length")
    # SGLang caps max_new_tokens at max_req_len - input - 1 (max_req_len = min(context, KV) - 1):
    # such a request completes short, and says so; every other one gets all its tokens.
    max_req_len = min(4096, capacity) - 1
    for i in done.nonzero()[0]:
        cap = max(1, max_req_len - requests[i].input_length - 1)
        if cap < wanted[i]:
            assert generated[i] == cap and rec.reason[i].startswith("output cut"), (i, rec.reason[i])
        else:
            assert generated[i] == wanted[i], i
    # Everything is released: only the radix tree holds KV, and all of it is evictable.
    assert eng.pool.private_tokens == 0
    assert eng.tree.protected_size == 0
    assert eng.pool.free_tokens + eng.tree.evictable_size == eng.capacity


def test_output_is_cut_when_prompt_plus_output_exceed_the_kv_pool():
    """Found by Hypothesis: 1499 + 200 tokens in a 1700-token pool.  SGLang's max_req_len is
    min(context, pool) - 1 = 1699, so max_new_tokens = 1699 - 1499 - 1 = 199: the request
    completes with 199 tokens and the reason says the output was cut."""
    requests = [make_request(0, 0.0, 1, 1, hash_ids=[1], block_size=64),
                make_request(1, 0.0, 1499, 200, hash_ids=list(range(100, 124)), block_size=64)]
    rec = RequestRecorder()
    for r in requests:
        rec.register(r.index, r.request_id, None, 0, r.input_length, r.output_length, False)
    eng = SGLangEngine(0, rec, EngineLimits(1700, 4096), SGLangOptions(page_size=1), None)
    now = 0.0
    for r in requests:
        rec.arrived(r.index, now)
        eng.add_request(r, now)
    while eng.has_work():
        plan = eng.schedule(now)
        assert plan is not None
        now += 0.01
        eng.complete(plan, now)
        eng.check_invariants()
    assert list(rec.column("status")) == [Status.COMPLETED, Status.COMPLETED]
    assert list(rec.column("generated")) == [1, 199]
    assert rec.reason[1] == "output cut at the context length"
