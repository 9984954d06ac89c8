"""Workload config models: defaults, constraints and key paths in errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from servesim.workload.config import (
    ClosedLoopWorkload,
    LognormalLength,
    SyntheticWorkload,
    TraceWorkload,
    parse_workload,
)

SYN = {
    "kind": "synthetic",
    "num_requests": 10,
    "arrival": {"process": "poisson", "rate": 2.0},
    "input": {"dist": "fixed", "value": 100},
    "output": {"dist": "uniform", "low": 1, "high": 5},
}


def locs(err: ValidationError) -> list[tuple]:
    return [e["loc"] for e in err.errors()]


def test_kinds_and_defaults():
    t = parse_workload({"kind": "trace", "path": "x.jsonl"})
    assert isinstance(t, TraceWorkload)
    assert (t.format, t.block_size, t.speedup, t.limit) == ("mooncake", 512, 1.0, None)
    s = parse_workload(SYN)
    assert isinstance(s, SyntheticWorkload) and s.arrival.burstiness == 1.0
    assert s.input.min == 1 and s.input.max is None
    c = parse_workload(
        {"kind": "closed_loop", "recipe": "inferencex_random", "concurrency": 8, "isl": 1024, "osl": 512}
    )
    assert isinstance(c, ClosedLoopWorkload)
    assert (c.resolved_num_prompts, c.resolved_warmup, c.range_ratio) == (80, 16, 0.8)
    f = parse_workload({"kind": "closed_loop", "recipe": "fixed", "concurrency": 8, "isl": 1, "osl": 1})
    assert (f.resolved_num_prompts, f.resolved_warmup) == (80, 0)


@pytest.mark.parametrize(
    "patch, loc",
    [
        ({"num_requests": 0}, ("synthetic", "num_requests")),
        ({"arrival": {"process": "poisson", "rate": 0}}, ("synthetic", "arrival", "rate")),
        ({"arrival": {"process": "gamma", "rate": 1, "burstiness": -1}}, ("synthetic", "arrival", "burstiness")),
        ({"input": {"dist": "normal", "mean": 10}}, ("synthetic", "input", "normal", "std")),
        ({"input": {"dist": "fixed", "value": 10, "min": 0}}, ("synthetic", "input", "fixed", "min")),
        ({"input": {"dist": "zipf", "value": 10}}, ("synthetic", "input")),
        ({"prefix": {"num_groups": 2, "length": 10, "share": 1.5}}, ("synthetic", "prefix", "share")),
        ({"block_size": 0}, ("synthetic", "block_size")),
        ({"typo": 1}, ("synthetic", "typo")),
    ],
)
def test_synthetic_errors_carry_key_path(patch, loc):
    with pytest.raises(ValidationError) as err:
        parse_workload({**SYN, **patch})
    assert loc in locs(err.value)


def test_cross_field_rules():
    with pytest.raises(ValidationError, match="high"):
        parse_workload({**SYN, "input": {"dist": "uniform", "low": 10, "high": 5}})
    with pytest.raises(ValidationError, match="max"):
        parse_workload({**SYN, "input": {"dist": "fixed", "value": 10, "min": 5, "max": 2}})
    with pytest.raises(ValidationError, match="burstiness applies only"):
        parse_workload({**SYN, "arrival": {"process": "poisson", "rate": 1, "burstiness": 2}})
    with pytest.raises(ValidationError, match="exactly one"):
        parse_workload({**SYN, "input": {"dist": "lognormal", "sigma": 1}})
    with pytest.raises(ValidationError, match="end_ms"):
        parse_workload({"kind": "trace", "path": "x", "start_ms": 10, "end_ms": 5})
    with pytest.raises(ValidationError):
        parse_workload({"kind": "closed_loop", "recipe": "fixed", "concurrency": 1, "isl": 1, "osl": 1,
                        "range_ratio": 0})
    with pytest.raises(ValidationError):
        parse_workload({"kind": "nope"})


def test_lognormal_parameterisations_agree():
    by_median = LognormalLength(dist="lognormal", median=100, sigma=0.5)
    by_mean = LognormalLength(dist="lognormal", mean=100 * 2.718281828459045 ** (0.125), sigma=0.5)
    assert by_median.mu == pytest.approx(by_mean.mu)
