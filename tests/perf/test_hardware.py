import pytest
import yaml

from servesim.errors import ModelError
from servesim.hardware import known_gpus, load_gpu

EXPECTED = {"h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300", "a100_80gb", "l40s",
            "mi300x", "mi325x", "mi355x"}


def test_all_bundled_gpus_load_with_sources():
    assert EXPECTED <= set(known_gpus())
    for name in known_gpus():
        g = load_gpu(name)
        assert g.memory_bytes > 0 and g.tflops["bf16"] > 0
        for key in ["memory_gb", "memory_bandwidth_gbs", "scale_up.bandwidth_gbs", "scale_out.bandwidth_gbs",
                    *[f"tflops.{k}" for k in g.tflops]]:
            assert g.sources.get(key), f"{name}: no source for {key}"


def test_alias_and_peaks():
    assert load_gpu("b200").name == "b200_sxm"
    h = load_gpu("H100")
    assert h.peak_flops("fp8") == pytest.approx(2 * h.peak_flops("bf16"), rel=1e-3)
    assert h.peak_flops("fp4") == h.peak_flops("bf16")  # unsupported: falls back


def test_unknown_gpu_lists_known():
    with pytest.raises(ModelError) as e:
        load_gpu("tpu_v9")
    assert "h100_sxm" in str(e.value)


def test_user_yaml(tmp_path):
    spec = {"name": "my_gpu", "vendor": "other", "memory_gb": 64, "memory_bandwidth_gbs": 2000,
            "tflops": {"bf16": 500, "fp8": 1000},
            "scale_up": {"kind": "pcie", "bandwidth_gbs": 32, "latency_us": 2},
            "scale_out": {"bandwidth_gbs": 25, "latency_us": 5}}
    p = tmp_path / "my_gpu.yaml"
    p.write_text(yaml.safe_dump(spec))
    g = load_gpu(p)
    assert g.name == "my_gpu" and g.memory_bytes == 64e9
    spec["bogus"] = 1
    p.write_text(yaml.safe_dump(spec))
    with pytest.raises(ModelError, match="bogus"):
        load_gpu(p)
