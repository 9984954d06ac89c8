"""The frontend stage: serial tokenizer queue, stream latency, scheduler CPU per pass."""

from __future__ import annotations

import numpy as np
import pytest

from servesim.metrics.recorder import RequestRecorder
from servesim.perf.frontend import Frontend, FrontendParams, SchedulerOverheadStepTime
from servesim.perf.plan import PassPlan, stretch_by_steps
from servesim.perf.simple import FixedStepTime, LinearStepTime
from servesim.workload.request import Request


def _req(n: int) -> Request:
    """A request of ``n`` prompt tokens (all the tokenizer reads)."""
    return Request(index=0, request_id="r", arrival=0.0, input_length=n, output_length=1, hash_ids=())


def test_tokenizer_is_one_fifo_server():
    fe = Frontend(FrontendParams(request_overhead_s=0.002, tokenize_base_s=0.001, tokenize_per_token_s=1e-6,
                                 first_token_overhead_s=0.0))
    # three requests sent at once queue behind each other
    t = [fe.admit_time(_req(1000), 0.0) for _ in range(3)]
    each = 0.001 + 1000e-6
    assert t == pytest.approx([each + 0.002, 2 * each + 0.002, 3 * each + 0.002])
    # a request sent after the queue drained does not wait
    assert fe.admit_time(_req(0), 10.0) == pytest.approx(10.0 + 0.001 + 0.002)


def test_zero_frontend_admits_immediately():
    fe = Frontend.disabled()
    assert fe.is_zero
    assert fe.admit_time(_req(5000), 3.5) == 3.5


def test_stream_latency_shifts_ttft_and_e2e_not_tpot():
    rec = RequestRecorder()
    for i in range(2):
        rec.register(i, f"r{i}", None, 0, 10, 5, False)
    for name, vals in (("arrival", [0.0, 0.0]), ("first_token", [0.1, np.nan]), ("second_token", [0.2, np.nan]),
                       ("last_token", [0.5, np.nan]), ("finish", [0.5, 1.0])):
        rec.column(name)[:] = vals
    Frontend(FrontendParams(first_token_overhead_s=0.03)).apply_stream_latency(rec)
    assert rec.column("first_token")[0] == pytest.approx(0.13)
    assert rec.column("last_token")[0] - rec.column("first_token")[0] == pytest.approx(0.4)
    assert rec.column("finish")[0] == pytest.approx(0.53)
    assert np.isnan(rec.column("first_token")[1]) and rec.column("finish")[1] == 1.0  # never got a token


def test_scheduler_overhead_wrapper_matches_pass_by_pass():
    inner = LinearStepTime(base_s=0.004, per_decode_request_s=1e-4, per_context_token_s=1e-7)
    st = SchedulerOverheadStepTime(inner, 0.002, 1e-5)
    ctx = np.array([100, 2000, 37])
    plan = PassPlan(decode_ctx=ctx)
    assert st.pass_time(plan) == pytest.approx(inner.pass_time(plan) + 0.002 + 3e-5)
    np.testing.assert_allclose(st.decode_stretch_times(ctx, 7), stretch_by_steps(st, ctx, 7))


def test_async_scheduling_hides_scheduler_time():
    inner = FixedStepTime(0.01)
    assert Frontend(FrontendParams(scheduler_pass_s=0.003, async_scheduling=True)).wrap_step_time(inner) is inner
    wrapped = Frontend(FrontendParams(scheduler_pass_s=0.003)).wrap_step_time(inner)
    assert wrapped.pass_time(PassPlan(decode_ctx=np.array([5]))) == pytest.approx(0.013)


def test_params_reject_unknown_and_negative():
    with pytest.raises(Exception):
        FrontendParams(tokenize_s=1.0)
    with pytest.raises(Exception):
        FrontendParams(first_token_overhead_s=-1.0)
