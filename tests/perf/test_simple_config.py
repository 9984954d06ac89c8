import numpy as np
import pytest

from servesim.errors import ConfigError
from servesim.hardware import load_gpu
from servesim.models import load_model
from servesim.perf import AnalyticStepTime, FixedStepTime, LinearStepTime, PassPlan, build_step_time
from servesim.perf.plan import stretch_by_steps


def test_fixed():
    f = FixedStepTime(0.02)
    assert f.pass_time(PassPlan()) == 0.02
    np.testing.assert_array_equal(f.decode_stretch_times(np.array([5, 6]), 4), [0.02] * 4)
    with pytest.raises(ConfigError):
        FixedStepTime(0)


def test_linear_and_stretch():
    lin = LinearStepTime(0.005, 1e-5, 2e-5, 1e-8, 1e-10)
    p = PassPlan(prefill_new=np.array([100]), prefill_cached=np.array([50]), decode_ctx=np.array([10, 20]))
    pairs = 100 * 50 + 100 * 101 / 2
    assert lin.pass_time(p) == pytest.approx(0.005 + 1e-3 + 50e-8 + 4e-5 + 30e-8 + pairs * 1e-10)
    ctx = np.array([5, 900, 31])
    np.testing.assert_allclose(lin.decode_stretch_times(ctx, 50), stretch_by_steps(lin, ctx, 50), rtol=1e-12)


def test_build_step_time_variants(tmp_path):
    m, g = load_model("qwen3-32b"), load_gpu("h100")
    assert isinstance(build_step_time({"model": "fixed", "seconds": 0.01}, m, g), FixedStepTime)
    assert isinstance(build_step_time({"model": "linear", "base_s": 0.01}, m, g), LinearStepTime)
    cal = tmp_path / "cal.yaml"
    cal.write_text("params:\n  gemm_eff_max: 0.5\n")
    st = build_step_time({"model": "analytic", "params": {"mem_eff": 0.7}, "calibration": str(cal)}, m, g, tp=2)
    assert isinstance(st, AnalyticStepTime) and st.p.gemm_eff_max == 0.5 and st.p.mem_eff == 0.7
    assert isinstance(build_step_time(None, m, g), AnalyticStepTime)
    with pytest.raises(ConfigError, match="seconds"):
        build_step_time({"model": "fixed", "seconds": -1}, m, g)
    with pytest.raises(ConfigError, match="perf.params"):
        build_step_time({"model": "analytic", "params": {"nope": 1}}, m, g)
    with pytest.raises(ConfigError):
        build_step_time({"model": "magic"}, m, g)
