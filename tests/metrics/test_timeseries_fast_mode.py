"""Fast mode records the same time series as pass by pass.

Pass-by-pass simulation offers every pass end to the sampler; a stretch used to offer only
its last, which is usually where an arrival cut it, so fast-mode rows over-counted waiting
requests (0.40 against 0.03 on average in the run that found it) and had fewer rows.
"""

from __future__ import annotations

import numpy as np
import pytest

from servesim.api import predict

CONFIG = {
    "seed": 2,
    "workload": {"kind": "synthetic", "num_requests": 250, "arrival": {"process": "poisson", "rate": 10.0},
                 "input": {"dist": "uniform", "low": 200, "high": 3000},
                 "output": {"dist": "uniform", "low": 50, "high": 600}},
    "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "workers": 2},
    "output": {"dir": None, "timeseries": True, "timeseries_interval_s": 0.5},
}


def _series(engine: str, mode: str) -> dict[str, np.ndarray]:
    cfg = dict(CONFIG, simulation={"mode": mode})
    cfg["deployment"] = dict(CONFIG["deployment"], engine={"name": engine})
    return predict(cfg).timeseries.columns()


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
def test_fast_mode_samples_the_pass_ends_step_mode_samples(engine):
    fast, step = _series(engine, "fast"), _series(engine, "step")
    assert len(step["time_s"]) > 40
    for name, col in step.items():
        np.testing.assert_allclose(fast[name], col, rtol=1e-9, atol=0, err_msg=name)


@pytest.mark.parametrize("seed", range(4))
def test_passes_to_sample_is_the_first_pass_end_sample_would_record(seed):
    """The stretch is cut at the first end whose distance from the last row reaches the
    interval, computed as sample() computes it (a difference of doubles), ties included."""
    import numpy as np

    from servesim.metrics.timeseries import TimeSeries

    rng = np.random.default_rng(seed)
    ts = TimeSeries(0.1)
    for _ in range(300):
        last = float(rng.uniform(0, 100))
        ts._last_t[0] = last
        ends = last + np.cumsum(rng.choice([0.0, 0.01, 0.0333, 0.1 / 3], size=int(rng.integers(1, 80))))
        if rng.random() < 0.3:
            ends = np.sort(np.append(ends, last + 0.1))  # a pass end exactly one interval on
        want = next((i + 1 for i, e in enumerate(ends.tolist()) if e - last >= 0.1), ends.size)
        assert ts.passes_to_sample(0, ends) == want
