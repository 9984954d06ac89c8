"""The frontend stage inside ``servesim predict`` (the path validate shares)."""

from __future__ import annotations

import numpy as np
import pytest

from servesim.api import predict
from servesim.cluster.deployment import build_deployment
from servesim.config import load_config
from servesim.perf.analytic import AnalyticStepTime
from servesim.perf.frontend import FrontendParams, SchedulerOverheadStepTime


def _cfg(concurrency: int, perf: dict) -> dict:
    return {
        "seed": 0,
        "workload": {"kind": "closed_loop", "recipe": "fixed", "concurrency": concurrency, "isl": 1000,
                     "osl": 20, "num_prompts": 4 * concurrency, "warmup": 0},
        # SGLang's normal loop: with the overlap loop a closed-loop request sent when the last
        # one finished meets that one's discarded decode pass, which hides part of the
        # tokenizer's time (engines/sglang/overlap.py); these tests count the frontend alone
        "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm",
                       "engine": {"name": "sglang", "disable_overlap_schedule": True}},
        "perf": perf,
        "output": {"dir": None},
    }


def _ttft_ms(concurrency: int, perf: dict) -> float:
    return predict(_cfg(concurrency, perf)).summary["latency"]["ttft_ms"]["mean"]


def test_frontend_ttft_grows_with_concurrency_in_closed_loop():
    """A serial tokenizer: requests released together queue, so the frontend's share of TTFT grows."""
    fe = {"tokenize_per_token_s": 2e-5, "tokenize_base_s": 1e-3, "first_token_overhead_s": 0.01}
    engine_only = {"model": "fixed", "seconds": 0.02}
    with_fe = {"model": "fixed", "seconds": 0.02, "frontend": fe}
    added = {c: _ttft_ms(c, with_fe) - _ttft_ms(c, engine_only) for c in (1, 8, 32)}
    assert added[1] == pytest.approx(10 + 1 + 20, rel=0.05)  # stream latency + one tokenization (ms)
    assert added[1] < added[8] < added[32]
    assert added[32] > 5 * added[1]


def test_calibration_null_is_the_engine_only_view():
    dep = build_deployment(load_config(_cfg(4, {"calibration": None})))
    assert dep.make_frontend() is None and isinstance(dep.step_time, AnalyticStepTime)
    assert dep.frontend_params == FrontendParams.zero()
    assert dep.describe()["perf"]["calibration"] is None
    # the default calibration sets the engine's scheduler time only; the client stays "none"
    dflt = build_deployment(load_config(_cfg(4, {})))
    assert dflt.describe()["perf"]["calibration"] == "default.yaml"
    assert dflt.describe()["perf"]["client"] == "none"
    assert dflt.make_frontend() is None
    # a client profile switches the client-side stages on and adds them to TTFT
    cfg = _cfg(4, {}) | {"client": "inferencex"}
    assert build_deployment(load_config(cfg)).make_frontend() is not None
    with_client = predict(_cfg(1, {}) | {"client": "inferencex"}).summary["latency"]["ttft_ms"]["mean"]
    assert with_client > _ttft_ms(1, {})
    stages_off = {k: 0.0 for k in ("request_overhead_s", "tokenize_base_s", "tokenize_per_token_s",
                                   "first_token_overhead_s", "scheduler_pass_s", "scheduler_per_request_s")}
    assert _ttft_ms(1, {}) >= _ttft_ms(1, {"frontend": stages_off})


def test_scheduler_overhead_wraps_the_step_time_and_async_hides_it():
    dep = build_deployment(load_config(_cfg(4, {"calibration": None, "frontend": {"scheduler_pass_s": 1e-3}})))
    assert isinstance(dep.step_time, SchedulerOverheadStepTime)
    dep = build_deployment(load_config(_cfg(4, {"calibration": None, "frontend": {
        "scheduler_pass_s": 1e-3, "async_scheduling": True}})))
    assert isinstance(dep.step_time, AnalyticStepTime)


def test_bad_frontend_key_and_calibration_path(tmp_path):
    from servesim.errors import ConfigError

    with pytest.raises(ConfigError, match="perf.frontend"):
        build_deployment(load_config(_cfg(4, {"frontend": {"nope": 1}})))
    with pytest.raises(ConfigError, match="perf.calibration"):
        build_deployment(load_config(_cfg(4, {"calibration": str(tmp_path / "missing.yaml")})))


def test_a_model_group_of_the_calibration_applies_in_predict(tmp_path):
    """predict resolves the deployment's model@precision group on top of its GPU/engine group."""
    import yaml

    path = tmp_path / "cal.yaml"
    path.write_text(yaml.safe_dump({"shared": {"frontend": {"scheduler_pass_s": 0.01}}, "groups": {
        "h100_sxm/sglang": {"frontend": {"scheduler_pass_s": 0.02}},
        "h100_sxm/sglang/meta-llama/Llama-3.1-8B-Instruct@bf16": {"frontend": {"scheduler_pass_s": 0.5}},
        "h100_sxm/sglang/meta-llama/Llama-3.1-8B-Instruct@fp8": {"frontend": {"scheduler_pass_s": 9.0}},
    }}))
    perf = {"calibration": str(path)}
    pred = predict(_cfg(1, perf))
    resolved = pred.to_json()["deployment_resolved"]["perf"]
    assert resolved["calibration_group"] == "h100_sxm/sglang/meta-llama/Llama-3.1-8B-Instruct@bf16"
    assert resolved["frontend"]["scheduler_pass_s"] == 0.5
    fp8 = _cfg(1, perf)
    fp8["deployment"]["weight_dtype"] = "fp8"
    assert predict(fp8).to_json()["deployment_resolved"]["perf"]["frontend"]["scheduler_pass_s"] == 9.0


@pytest.mark.parametrize("stream_s", [0.0, 0.05])
def test_closed_loop_sends_the_next_request_at_the_engines_end(stream_s):
    """The slot frees when the engine ends the request; the recorded finish adds the stream
    latency (``first_token_overhead_s`` is fitted as a TTFT offset, not only the stream's own
    latency, so it must not idle the client; docs/workload.md)."""
    fe = {"tokenize_per_token_s": 0.0, "tokenize_base_s": 0.0, "request_overhead_s": 0.0,
          "first_token_overhead_s": stream_s}
    pred = predict(_cfg(1, {"model": "fixed", "seconds": 0.02, "frontend": fe}))
    arrival, finish = pred.recorder.column("arrival"), pred.recorder.column("finish")
    assert arrival.size == 4
    assert arrival[1:] == pytest.approx(finish[:-1] - stream_s, abs=1e-12)
    # 1000 prompt tokens and 20 output tokens at 0.02 s per pass: the engine takes 20 passes
    assert finish - arrival == pytest.approx(20 * 0.02 + stream_s)


def test_session_turn_waits_its_think_time_after_the_engine_ends_the_previous_one():
    sessions = {"turns": {"dist": "fixed", "value": 3}, "think_time_s": {"dist": "fixed", "value": 1.5},
                "new_input": {"dist": "fixed", "value": 100}}
    cfg = {"seed": 0,
           "workload": {"kind": "synthetic", "num_requests": 6, "arrival": {"process": "constant", "rate": 0.1},
                        "input": {"dist": "fixed", "value": 500}, "output": {"dist": "fixed", "value": 10},
                        "sessions": sessions},
           "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "engine": "sglang"},
           "perf": {"model": "fixed", "seconds": 0.02, "frontend": {"first_token_overhead_s": 0.05}},
           "output": {"dir": None}}
    rec = predict(cfg).recorder
    turn, arrival, finish = rec.column("turn"), rec.column("arrival"), rec.column("finish")
    later = np.flatnonzero(turn > 0)
    assert later.size == 4
    for i in later:  # turns of a session are consecutive requests
        assert arrival[i] == pytest.approx(finish[i - 1] - 0.05 + 1.5, abs=1e-9)


def test_per_request_scheduler_time_counts_the_busiest_attention_rank():
    """Each attention-DP rank runs its own scheduler in parallel: the pass waits for the busiest one."""
    from servesim.perf.plan import PassPlan, rank_union

    class Zero:
        def pass_time(self, plan):
            return 0.0

    st = SchedulerOverheadStepTime(Zero(), 1e-3, 1e-5)
    one = PassPlan(decode_ctx=np.full(6, 100), prefill_new=np.array([50]), prefill_cached=np.array([0]))
    assert st.pass_time(one) == pytest.approx(1e-3 + 7 * 1e-5)
    ranks = rank_union((PassPlan(decode_ctx=np.full(2, 10)), None, PassPlan(decode_ctx=np.full(5, 10))))
    assert ranks.decode_ctx.size == 7
    assert st.pass_time(ranks) == pytest.approx(1e-3 + 5 * 1e-5)


def _tpot_ms(engine: dict, gpu_s: float, sched_s: float) -> float:
    cfg = _cfg(4, {"model": "fixed", "seconds": gpu_s,
                   "frontend": {"scheduler_pass_s": sched_s}})
    cfg["deployment"]["engine"] = engine
    return predict(cfg).summary["latency"]["tpot_ms"]["mean"]


def test_sglang_overlap_loop_hides_scheduler_time_shorter_than_the_pass():
    """SGLang's overlap loop prepares a pass while the GPU runs the one before: a pass takes the
    longer of the GPU's and the scheduler's time.  Its normal loop, and vLLM's synchronous one,
    pay both."""
    overlap, serial = {"name": "sglang"}, {"name": "sglang", "disable_overlap_schedule": True}
    assert build_deployment(load_config(_cfg(4, {"frontend": {"scheduler_pass_s": 1e-3}}) | {
        "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm",
                       "engine": overlap}})).step_time.overlapped
    # a 20 ms pass hides 5 ms of CPU; the normal loop adds them
    assert _tpot_ms(overlap, 0.02, 5e-3) == pytest.approx(_tpot_ms(overlap, 0.02, 0.0), rel=1e-9)
    assert _tpot_ms(serial, 0.02, 5e-3) == pytest.approx(25.0, rel=1e-6)
    # CPU-bound: 30 ms of scheduling behind a 20 ms pass sets the pace
    assert _tpot_ms(overlap, 0.02, 0.03) == pytest.approx(30.0, rel=1e-6)
    assert _tpot_ms(serial, 0.02, 0.03) == pytest.approx(50.0, rel=1e-6)
    assert _tpot_ms({"name": "vllm", "async_scheduling": False}, 0.02, 5e-3) == pytest.approx(25.0, rel=1e-6)


def test_vllm_async_scheduling_hides_scheduler_time_as_sglangs_overlap_loop_does():
    """vLLM's async scheduling (its default from 0.14, and servesim's) chooses the next pass while
    the GPU runs this one: a pass takes the longer of the two times, as SGLang's overlap loop."""
    asyn = {"name": "vllm"}
    assert _tpot_ms(asyn, 0.02, 5e-3) == pytest.approx(20.0, rel=1e-6)
    assert _tpot_ms(asyn, 0.02, 0.03) == pytest.approx(30.0, rel=1e-6)
    assert _tpot_ms({"name": "vllm", "async_scheduling": False}, 0.02, 0.03) == pytest.approx(50.0, rel=1e-6)
