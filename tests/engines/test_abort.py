"""Aborting a request (a client that went away), in each engine model.

Each scenario drives one worker pass by pass through :class:`Simulation` in ``"driven"`` mode,
as ``servesim serve`` does, and aborts one request: waiting (no seat for it), decoding, or
between chunks of its prompt.  The checks: the request ends ``CANCELLED`` once (and not
again when the run closes), KV in use returns to what it was without it, its computed prefix
stays in the cache (found by a lookup, evictable), the engine's invariants hold after every
pass, and the other requests still complete every token they asked for.
"""

from __future__ import annotations

import pytest

from servesim.cluster.routers import RoundRobinRouter
from servesim.cluster.worker import Worker
from servesim.engines.base import EngineLimits
from servesim.engines.sglang.options import SGLangOptions
from servesim.engines.sglang.scheduler import SGLangEngine
from servesim.engines.trtllm.options import TRTLLMOptions
from servesim.engines.trtllm.scheduler import TRTLLMEngine
from servesim.engines.vllm.options import VLLMOptions
from servesim.engines.vllm.scheduler import VLLMEngine
from servesim.metrics.recorder import RequestRecorder, Status
from servesim.metrics.summary import summarize
from servesim.perf.simple import FixedStepTime
from servesim.report.files import request_table
from servesim.sim.simulation import Simulation
from servesim.workload.request import Request

STEP = 0.01
CHUNK = 128  # tokens per pass: a 512-token prompt takes four prefill passes
KV = 20_000


def _engine(name: str, rec: RequestRecorder, seats: int):
    limits = EngineLimits(kv_capacity_tokens=KV, context_length=4096)
    if name == "vllm":
        return VLLMEngine(0, rec, limits, VLLMOptions(max_num_batched_tokens=CHUNK, max_num_seqs=seats,
                                                       enable_chunked_prefill=True))
    if name == "sglang":
        return SGLangEngine(0, rec, limits, SGLangOptions(max_running_requests=seats, page_size=1), CHUNK)
    return TRTLLMEngine(0, rec, limits, TRTLLMOptions(max_batch_size=seats, max_num_tokens=CHUNK,
                                                      enable_chunked_context=True, tokens_per_block=16))


ENGINES = ("vllm", "sglang", "trtllm")


class Driven:
    """One worker driven pass by pass, requests submitted by hand (as LiveFleet does)."""

    def __init__(self, name: str, seats: int = 8) -> None:
        self.rec = RequestRecorder()
        self.engine = _engine(name, self.rec, seats)
        self.worker = Worker(0, self.engine, FixedStepTime(STEP), 1, fast_forward=False)
        self.sim = Simulation(iter(()), "driven", None, [self.worker], RoundRobinRouter(), self.rec)
        self.terminal: list[tuple[int, float]] = []
        self.sim.listen_terminal(lambda req, t: self.terminal.append((req.index, t)))
        # between passes (after the pass end's commit and aborts, before the next pass is chosen)
        self.sim.listen_pass_end(lambda worker, t: self.engine.check_invariants())
        self.n = 0
        self.t = 0.0

    def submit(self, n_in: int, n_out: int) -> Request:
        ids = tuple(1000 * (self.n + 1) + k for k in range(-(-n_in // 16)))
        req = Request(index=self.n, request_id=f"r{self.n}", arrival=self.t, input_length=n_in,
                      output_length=n_out, hash_ids=ids, block_size=16)
        self.n += 1
        self.sim.submit(req, self.t)
        self.sim.start_idle_workers(self.t)
        return req

    def passes(self, k: int) -> None:
        """Run ``k`` pass ends (the worker is idle between passes only at a pass end)."""
        for _ in range(k):
            nxt = self.sim.next_event_time()
            assert nxt < float("inf"), "no pass in flight"
            self.sim.advance_to(nxt)
            self.t = nxt

    def abort(self, req: Request) -> str:
        """Abort ``req`` now; a pass is in flight (the worker always starts the next one at a
        pass end), so the abort takes effect at that pass's end, which this runs to."""
        out = self.sim.abort(req.index, self.t)
        assert out == "deferred"
        assert self.status(req) == Status.PENDING
        self.passes(1)
        return out

    def drain(self) -> None:
        while self.sim.next_event_time() < float("inf"):
            self.passes(1)

    def kv_used(self) -> int:
        return self.engine.snapshot().kv_used_tokens

    def status(self, req: Request) -> int:
        return int(self.rec.column("status")[req.index])


def _finish(d: Driven, aborted: Request, others: list[Request]) -> None:
    """Run to the end and check the accounting: one terminal state each, the others whole."""
    d.drain()
    d.sim._close(d.t)  # the run's close: nothing left pending, nothing terminal twice
    assert d.status(aborted) == Status.CANCELLED
    assert [i for i, _ in d.terminal].count(aborted.index) == 1
    for r in others:
        assert d.status(r) == Status.COMPLETED, r.index
        assert int(d.rec.column("generated")[r.index]) == r.output_length
    counts = summarize(d.rec, 1)["requests"]
    assert counts["cancelled"] == 1 and counts["completed"] == len(others)
    rows = request_table(d.rec).to_pydict()  # requests.parquet's rows
    assert rows["status"][aborted.index] == "cancelled"
    assert rows["reason"][aborted.index] == "cancelled by the client"
    assert d.kv_used() == 0
    d.engine.check_invariants()


@pytest.mark.parametrize("name", ENGINES)
def test_abort_waiting_request(name):
    d = Driven(name, seats=1)
    a = d.submit(64, 20)
    d.passes(2)  # a is decoding; b arrives with no seat free
    b = d.submit(64, 5)
    d.passes(1)
    snap = d.engine.snapshot()
    assert (snap.running, snap.waiting) == (1, 1)
    used = d.kv_used()
    d.abort(b)
    assert d.status(b) == Status.CANCELLED
    assert d.engine.snapshot().waiting == 0
    assert d.kv_used() <= used + 16  # a's decode may open a block; b never held any
    assert int(d.rec.column("generated")[b.index]) == 0
    _finish(d, b, [a])


@pytest.mark.parametrize("name", ENGINES)
def test_abort_decoding_request_frees_its_kv_and_keeps_its_prefix_cached(name):
    d = Driven(name)
    base = d.kv_used()
    a = d.submit(256, 200)
    d.passes(4)  # two prefill chunks, then decoding
    b = d.submit(64, 10)
    used_with_a = d.kv_used()
    assert used_with_a > base and int(d.rec.column("generated")[a.index]) >= 1
    gen_before = int(d.rec.column("generated")[a.index])
    assert d.sim.abort(a.index, d.t + STEP / 2) == "deferred"  # mid-pass: handled at its end
    assert d.status(a) == Status.PENDING
    d.passes(1)
    d.sim.start_idle_workers(d.t)
    assert d.status(a) == Status.CANCELLED
    assert float(d.rec.column("finish")[a.index]) == pytest.approx(d.t)  # at the pass end
    assert int(d.rec.column("generated")[a.index]) <= gen_before + 1  # the pass in flight, at most
    assert d.engine.snapshot().running <= 1
    # its prompt's KV stays cached (evictable, so not counted as used)
    assert d.engine.held_prefix_tokens(a) >= 192
    _finish(d, a, [b])


@pytest.mark.parametrize("name", ENGINES)
def test_abort_mid_prefill(name):
    d = Driven(name)
    a = d.submit(512, 10)  # four chunks of 128
    b = d.submit(32, 10)
    d.passes(2)
    assert int(d.rec.column("generated")[a.index]) == 0  # still prefilling
    assert d.kv_used() > 0
    d.abort(a)  # at the end of its third chunk: 384 of 512 prompt tokens computed
    assert d.status(a) == Status.CANCELLED
    assert int(d.rec.column("generated")[a.index]) == 0
    assert d.engine.held_prefix_tokens(a) >= 256  # the computed chunks stay cached
    _finish(d, a, [b])


@pytest.mark.parametrize("name", ENGINES)
def test_abort_of_an_ended_request_changes_nothing(name):
    d = Driven(name)
    a = d.submit(32, 2)
    d.drain()
    assert d.status(a) == Status.COMPLETED
    assert d.sim.abort(a.index, d.t) == "ended"
    assert d.status(a) == Status.COMPLETED


def test_abort_is_refused_with_disaggregation():
    d = Driven("vllm")
    a = d.submit(32, 2)
    d.sim.disagg = object()  # any coordinator: the hand-off cannot be undone
    with pytest.raises(ValueError, match="disaggregated"):
        d.sim.abort(a.index, d.t)


# -- the engine verb itself, between passes (driven by hand: schedule, complete, abort) -------------
def _by_hand(name: str):
    rec = RequestRecorder()
    eng = _engine(name, rec, seats=8)
    reqs = []
    for i, (n_in, n_out) in enumerate([(512, 10), (64, 50), (64, 8)]):
        ids = tuple(1000 * (i + 1) + k for k in range(-(-n_in // 16)))
        req = Request(index=i, request_id=f"r{i}", arrival=0.0, input_length=n_in, output_length=n_out,
                      hash_ids=ids, block_size=16)
        rec.register(i, req.request_id, None, 0, n_in, n_out, False)
        rec.arrived(i, 0.0)
        reqs.append(req)
    return rec, eng, reqs


def _step(eng, t: float) -> float:
    plan = eng.schedule(t)
    assert plan is not None
    eng.complete(plan, t + STEP)
    eng.check_invariants()
    return t + STEP


@pytest.mark.parametrize("name", ENGINES)
def test_engine_abort_between_passes(name):
    """Mid-prefill, decoding and waiting requests aborted through ``Engine.abort`` itself; KV in
    use falls back to zero with nothing else held, and the engine keeps serving the rest."""
    rec, eng, (long, dec, late) = _by_hand(name)
    t = 0.0
    eng.add_request(dec, t)
    eng.add_request(long, t)
    for _ in range(3):
        t = _step(eng, t)
    assert int(rec.column("generated")[dec.index]) >= 1  # decoding
    assert int(rec.column("generated")[long.index]) == 0  # mid-prefill
    eng.add_request(late, t)
    # waiting (SGLang's overlap loop may still hold it in its inbox): leaves without KV
    used = eng.snapshot().kv_used_tokens
    assert eng.abort(late.index, t) is True
    assert eng.snapshot().kv_used_tokens == used
    assert eng.abort(long.index, t) is True
    eng.check_invariants()
    assert eng.abort(dec.index, t) is True
    eng.check_invariants()
    snap = eng.snapshot()
    assert (snap.running, snap.waiting, snap.kv_used_tokens) == (0, 0, 0)
    assert [int(s) for s in rec.column("status")] == [Status.CANCELLED] * 3
    assert {r.index for r in eng.terminated} == {0, 1, 2}
    assert eng.abort(dec.index, t) is False  # gone: a second abort changes nothing
    assert eng.held_prefix_tokens(dec) > 0 and eng.held_prefix_tokens(long) > 0


@pytest.mark.parametrize("name", ENGINES)
def test_attention_dp_rank_holding_the_request_drops_it(name):
    """With attention data parallelism the abort reaches the rank that holds the request; the
    other rank's request runs on untouched."""
    from tests.engines.test_attention_dp import dp_engine

    rec = RequestRecorder()
    opts = {"chunk": CHUNK} if name == "sglang" else {}
    eng = dp_engine(name, rec, dp=2, **opts)
    worker = Worker(0, eng, FixedStepTime(STEP), 1, fast_forward=False)
    sim = Simulation(iter(()), "driven", None, [worker], RoundRobinRouter(), rec)
    reqs = []
    for i in range(2):
        ids = tuple(1000 * (i + 1) + k for k in range(16))
        req = Request(index=i, request_id=f"r{i}", arrival=0.0, input_length=256, output_length=40,
                      hash_ids=ids, block_size=16)
        sim.submit(req, 0.0)
        reqs.append(req)
    sim.start_idle_workers(0.0)
    for _ in range(5):
        t = sim.next_event_time()
        sim.advance_to(t)
    ranks = [int(r) for r in rec.column("dp_rank")]
    assert sorted(ranks) == [0, 1]
    assert sim.abort(0, t + STEP / 2) == "deferred"
    sim.advance_to(sim.next_event_time())
    eng.check_invariants()
    assert int(rec.column("status")[0]) == Status.CANCELLED
    assert eng.ranks[ranks[0]].snapshot().kv_used_tokens == 0
    assert eng.ranks[ranks[1]].snapshot().running == 1
    while sim.next_event_time() < float("inf"):
        sim.advance_to(sim.next_event_time())
    assert int(rec.column("status")[1]) == Status.COMPLETED and int(rec.column("generated")[1]) == 40


def test_abort_while_crossing_the_frontend():
    """A request aborted before it reaches the router (still in the API server) is never given
    to an engine and ends cancelled when it would have reached it."""
    from servesim.perf.frontend import Frontend

    rec = RequestRecorder()
    eng = _engine("vllm", rec, seats=8)
    worker = Worker(0, eng, FixedStepTime(STEP), 1, fast_forward=False)
    sim = Simulation(iter(()), "driven", None, [worker], RoundRobinRouter(), rec, frontend=Frontend())
    terminal = []
    sim.listen_terminal(lambda req, t: terminal.append(req.index))
    req = Request(index=0, request_id="r0", arrival=0.0, input_length=64, output_length=4,
                  hash_ids=(1, 2, 3, 4), block_size=16)
    sim.submit(req, 0.0)
    assert int(rec.column("worker")[0]) == -1  # still in the frontend
    assert sim.abort(0, 0.0) == "deferred"
    while sim.next_event_time() < float("inf"):
        sim.advance_to(sim.next_event_time())
    assert terminal == [0] and int(rec.column("status")[0]) == Status.CANCELLED
    assert not eng.has_work() and int(rec.column("generated")[0]) == 0
