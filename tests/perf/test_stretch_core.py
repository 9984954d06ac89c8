"""The compiled decode-stretch pricing gives the numpy pricing's durations bit for bit.

Models without a context cap (Qwen3-32B), with a sliding window (gpt-oss-20b) and with a
sparse-attention top-k (GLM-5), attention data parallelism, random batches whose contexts
cross the cap during the stretch: the compiled and the numpy ``decode_stretch_times`` must
return identical arrays, and both must equal pricing every pass on its own.
"""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.compiled import compiled_module
from servesim.hardware import load_gpu
from servesim.models import load_model
from servesim.perf.analytic import AnalyticStepTime
from servesim.perf.plan import PassPlan
from simharness import python_versions

pytestmark = pytest.mark.skipif(compiled_module("perf._stretch_core") is None,
                                reason="compiled core not built or switched off")

CASES = {
    "qwen3-32b": dict(model="qwen3-32b", gpu="h100"),
    "gpt-oss-20b": dict(model="openai/gpt-oss-20b", gpu="h200"),
    "glm-5": dict(model="zai-org/GLM-5", gpu="b200", tp=8, ep=8, weight_dtype="fp8"),
}


@functools.cache
def models(case: str) -> tuple[AnalyticStepTime, AnalyticStepTime]:
    kw = dict(CASES[case])
    model, gpu = load_model(kw.pop("model")), load_gpu(kw.pop("gpu"))
    with python_versions():
        ref = AnalyticStepTime(model, gpu, **kw)
    fast = AnalyticStepTime(model, gpu, **kw)
    assert fast._compiled_stretch and not ref._compiled_stretch
    return ref, fast



@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(CASES)), st.integers(0, 2**32 - 1), st.integers(0, 40), st.integers(0, 300))
def test_compiled_stretch_equals_numpy(case: str, seed: int, n: int, steps: int) -> None:
    ref, fast = models(case)
    rng = random.Random(seed)
    cap = ref._cap or 4096
    ctx = np.array([rng.randint(1, 2 * cap) if rng.random() < 0.5 else rng.randint(max(1, cap - 300), cap + 5)
                    for _ in range(n)], dtype=np.int64)
    a, b = ref.decode_stretch_times(ctx, steps), fast.decode_stretch_times(ctx, steps)
    assert a.dtype == b.dtype == np.float64 and a.shape == b.shape == (steps,)
    assert a.tobytes() == b.tobytes()


def test_compiled_stretch_equals_pass_by_pass() -> None:
    _, fast = models("gpt-oss-20b")
    ctx = np.array([5, 120, 127, 128, 400], dtype=np.int64)  # crossing the 128-token window
    times = fast.decode_stretch_times(ctx, 12)
    for s in range(12):
        plan = PassPlan(decode_ctx=ctx + s)
        assert times[s] == fast.pass_time(plan), s


#: Scheduler CPU time per pass and per request: serial, and overlapped with the GPU at sizes that
#: make some passes CPU-bound (the longer of the two counts) and others not.
HOST = {False: (2e-4, 3e-6), True: (6e-3, 4e-4)}


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(sorted(CASES)), st.integers(0, 2**32 - 1), st.integers(0, 40), st.integers(0, 300),
       st.floats(0, 1e5), st.sampled_from([None, 0.0, 3.5e-4, 0.02]), st.booleans())
def test_stretch_ends_equal_the_summed_durations(case, seed, n, steps, now, extra, overlapped) -> None:
    """The fused end times equal ``d (+ extra); d.cumsum() + now`` bit for bit (``max(d, extra)``
    when the scheduler overlaps the GPU), compiled or not, and through the scheduler-overhead
    wrapper the worker uses."""
    from servesim.perf.frontend import SchedulerOverheadStepTime
    from servesim.perf.plan import plan_stretch_ends

    ref, fast = models(case)
    rng = random.Random(seed)
    ctx = np.array([rng.randint(1, 9000) for _ in range(n)], dtype=np.int64)
    d = ref.decode_stretch_times(ctx, steps)
    if extra is not None:
        d = np.maximum(d, extra) if overlapped else d + extra
    want = d.cumsum()
    want += now
    for model in (ref, fast):
        assert model.decode_stretch_ends(ctx, steps, now, extra, overlapped).tobytes() == want.tobytes()
    host = HOST[overlapped]
    for model in (ref, fast):
        wrapped = SchedulerOverheadStepTime(model, *host, overlapped)
        durations = wrapped.decode_stretch_times(ctx, steps)
        cpu = host[0] + host[1] * n
        gpu = model.decode_stretch_times(ctx, steps)
        assert durations.tobytes() == (np.maximum(gpu, cpu) if overlapped else gpu + cpu).tobytes()
        w = durations.cumsum()
        w += now
        assert plan_stretch_ends(wrapped, PassPlan(decode_ctx=ctx), steps, now).tobytes() == w.tobytes()
    # The worker's prepared pricer: the same ends, through the wrapper or not; none without the kernel.
    from servesim.perf.plan import stretch_pricer

    assert stretch_pricer(ref) is None and stretch_pricer(SchedulerOverheadStepTime(ref, *host, overlapped)) is None
    plain = fast.decode_stretch_ends(ctx, steps, now)
    wrapped = SchedulerOverheadStepTime(fast, *host, overlapped)
    for pricer, expected in ((stretch_pricer(fast), plain), (stretch_pricer(wrapped), w)):
        for _ in range(2):  # a fresh batch size, then its memoised terms
            assert pricer(ctx, steps, now).tobytes() == expected.tobytes()
        assert pricer(ctx.astype(np.int32), steps, now).tobytes() == expected.tobytes()


def test_decode_ctx_sums_equal_numpy() -> None:
    """The compiled pass pricing's context sums are numpy's: the full sum and the sum capped
    at a window (0.0 without one), from int64 and other integer arrays."""
    from servesim.perf._stretch_core import decode_ctx_sums

    rng = np.random.default_rng(3)
    for n in (0, 1, 7, 300):
        for dtype in (np.int64, np.int32):
            ctx = rng.integers(1, 200_000, n).astype(dtype)
            for cap in (0, None, 1, 4096, 10**9):
                want = (float(np.add.reduce(ctx)),
                        float(np.add.reduce(np.minimum(ctx, cap))) if cap else 0.0)
                assert decode_ctx_sums(ctx, cap) == want, (n, dtype, cap)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(sorted(CASES)), st.integers(0, 2**32 - 1), st.integers(1, 30), st.integers(1, 60),
       st.sampled_from(["none", "serial", "overlapped"]))
def test_consecutive_stretches_equal_each_priced_from_its_start(case: str, seed: int, n: int, steps: int,
                                                               overhead: str) -> None:
    """``StretchPricer.stretches`` gives, pass for pass, the end the worker computes for each
    stretch on its own: the pricer from the stretch's start, or ``start + pass_time`` for a
    stretch of one pass (whose serial scheduler overhead is added in another order)."""
    from servesim.perf.frontend import SchedulerOverheadStepTime
    from servesim.perf.plan import stretch_pricer

    _, fast = models(case)
    model = {"none": fast, "serial": SchedulerOverheadStepTime(fast, 3.3e-4, 1.7e-6),
             "overlapped": SchedulerOverheadStepTime(fast, *HOST[True], True)}[overhead]
    pricer = stretch_pricer(model)
    rng = random.Random(seed)
    cap = fast._cap or 4096
    ctx = np.array([rng.randint(1, 2 * cap) for _ in range(n)], dtype=np.int64)
    starts = bytearray(steps)
    for s in range(1, steps):
        starts[s] = rng.random() < 0.4
    now = rng.uniform(0.0, 5000.0)
    got = pricer.stretches(ctx, steps, now, starts)
    want = []
    t = now
    s = 0
    while s < steps:
        e = s + 1
        while e < steps and not starts[e]:
            e += 1
        if e - s == 1:
            want.append(t + model.pass_time(PassPlan(decode_ctx=ctx + s)))
        else:
            want.extend(pricer(ctx + s, e - s, t).tolist())
        t = want[-1]
        s = e
    assert got.tobytes() == np.array(want, dtype=np.float64).tobytes()
