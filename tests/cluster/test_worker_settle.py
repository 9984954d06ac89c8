"""Worker.settle: a stretch committed up to an instant, as pass-by-pass simulation has it then."""

from __future__ import annotations

import pytest

from servesim.cluster.worker import Worker
from servesim.engines.base import EngineLimits
from servesim.engines.sglang.scheduler import SGLangEngine
from servesim.engines.sglang.options import SGLangOptions
from servesim.metrics.recorder import RequestRecorder
from servesim.perf.simple import FixedStepTime

from simharness import make_request

PASS = 0.25  # exact in binary: pass ends are exact multiples


def _decoding_worker(overlap: bool = False) -> tuple[Worker, RequestRecorder]:
    """A worker whose one request (output 50) has prefilled at 0.25 and decodes in a stretch
    (SGLang's normal loop unless ``overlap``)."""
    rec = RequestRecorder()
    req = make_request(0, 0.0, 100, 50)
    rec.register(0, "r0", None, 0, 100, 50, False)
    eng = SGLangEngine(0, rec, EngineLimits(200_000, 131072), SGLangOptions(disable_overlap_schedule=not overlap),
                       8192)
    worker = Worker(0, eng, FixedStepTime(PASS), 1)
    eng.add_request(req, 0.0)
    assert worker.start_pass(0.0) == PASS  # the prefill
    worker.finish_pass()
    worker.start_pass(PASS)
    assert worker.ends.size == 49 and worker.ends[0] == 2 * PASS  # 49 decode passes to the last token
    return worker, rec


def test_settle_commits_the_passes_ended_and_keeps_the_rest():
    worker, rec = _decoding_worker()
    end, epoch = float(worker.ends[-1]), worker.epoch
    assert worker.settle(1.1) is False  # passes ending 0.5, 0.75, 1.0 are committed
    assert rec.column("emissions")[0] == 1 + 3 and rec.column("last_token")[0] == 1.0
    assert worker.busy and worker.start == 1.0 and worker.ends[0] == 1.25
    assert float(worker.ends[-1]) == end and worker.epoch == epoch  # the pending end event stands
    assert worker.passes == 1 + 3


def test_settle_at_a_pass_end_leaves_the_worker_to_be_restarted():
    worker, rec = _decoding_worker()
    epoch = worker.epoch
    assert worker.settle(1.25) is True  # pass-by-pass, the next pass is decided after this instant
    assert not worker.busy and worker.epoch == epoch + 1  # the stretch's end event is void
    assert rec.column("emissions")[0] == 1 + 4


def test_settle_before_any_pass_ended_changes_nothing():
    worker, rec = _decoding_worker()
    assert worker.settle(0.3) is False and worker.ends.size == 49 and rec.column("emissions")[0] == 1


def test_settle_after_an_unsettled_cut_is_refused():
    """Input that cut the stretch is already in the engine: a settle would schedule earlier passes with it."""
    worker, _rec = _decoding_worker()
    assert worker.truncate(1.1) == 1.25  # the stretch now ends with the pass in flight at 1.1
    with pytest.raises(AssertionError, match="cut its stretch"):
        worker.settle(1.2)


def test_input_cuts_one_pass_later_under_sglangs_overlap_loop():
    """The overlap loop chose the pass after the one in flight before the input came: it runs."""
    worker, _rec = _decoding_worker(overlap=True)
    assert worker.input_lag == 1
    assert worker.truncate(1.1) == 1.5  # the pass in flight at 1.1 ends at 1.25, the chosen one at 1.5
    worker.settle_on_input = True  # a worker read mid-stretch keeps only the pass in flight
    worker, _rec = _decoding_worker(overlap=True)
    worker.settle_on_input = True
    assert worker.truncate(1.1) == 1.25


def test_input_settles_first_when_the_worker_is_read_mid_stretch():
    worker, rec = _decoding_worker()
    worker.settle_on_input = True
    assert worker.truncate(1.1) == 1.25  # settled to 1.0, then cut after the pass in flight
    assert rec.column("emissions")[0] == 1 + 3 and worker.ends.tolist() == [1.25]
    assert worker.settle(1.2) is False  # nothing left to settle, no complaint
