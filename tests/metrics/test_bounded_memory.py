"""Bounded memory at any scale, checked at small scale by lowering the thresholds: spilled
columns, packed ids and chunked summaries give the same files as the in-memory path, and the
sketch's percentiles stay within their stated error."""

from __future__ import annotations

import json

import numpy as np
import pytest

import servesim.metrics.recorder as recorder_module
import servesim.metrics.stats as stats
import servesim.metrics.strings as strings
import servesim.metrics.summary as summary_module
from servesim.api import predict
from servesim.metrics.columns import Column
from servesim.metrics.stats import SKETCH_ALPHA, Accumulator, LogSketch, WeightedSamples, describe

CONFIG = {
    "seed": 5,
    "workload": {"kind": "synthetic", "num_requests": 1500, "arrival": {"process": "poisson", "rate": 30.0},
                 "input": {"dist": "uniform", "low": 50, "high": 1500}, "output": {"dist": "uniform", "low": 2, "high": 120},
                 "sessions": {"turns": {"dist": "uniform", "low": 1, "high": 3},
                              "think_time_s": {"dist": "exponential", "mean": 2.0},
                              "new_input": {"dist": "fixed", "value": 50}}},
    "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "workers": 2},
}


def _run(tmp_path, name):
    pred = predict(CONFIG)
    out = pred.write(tmp_path / name)
    return pred, out


def test_spilled_columns_write_the_same_files(tmp_path, monkeypatch):
    base, out_a = _run(tmp_path, "a")
    assert not base.recorder.spilled
    monkeypatch.setattr(recorder_module, "SPILL_AT", 300)
    monkeypatch.setattr(recorder_module, "KEEP_RESIDENT", 100)
    monkeypatch.setattr(strings, "CHUNK", 128)
    monkeypatch.setattr(summary_module, "SUMMARY_CHUNK", 257)
    small, out_b = _run(tmp_path, "b")
    assert small.recorder.spilled and small.recorder.request_id._packed  # the bounded path ran
    for name in ("requests.parquet", "timeseries.parquet"):
        assert (out_a / name).read_bytes() == (out_b / name).read_bytes(), name
    a = json.loads((out_a / "prediction.json").read_text())
    b = json.loads((out_b / "prediction.json").read_text())
    assert a == b


def test_sketch_beyond_the_exact_limit(monkeypatch):
    exact = predict(CONFIG).summary
    monkeypatch.setattr(stats, "EXACT_LIMIT", 200)
    monkeypatch.setattr(Accumulator.__init__, "__defaults__", (200,))
    monkeypatch.setattr(WeightedSamples.__init__, "__defaults__", (200,))
    sketched = predict(CONFIG).summary
    assert exact["statistics"] == {"exact": True, "sketch_relative_error": None}
    assert sketched["statistics"] == {"exact": False, "sketch_relative_error": SKETCH_ALPHA}
    assert sketched["requests"] == exact["requests"] and sketched["throughput"] == exact["throughput"]
    for metric, e in exact["latency"].items():
        s = sketched["latency"][metric]
        assert s["count"] == e["count"] and s["min"] == e["min"] and s["max"] == e["max"], metric
        assert s["mean"] == pytest.approx(e["mean"], rel=1e-9)
        for p in ("p50", "p90", "p95", "p99"):
            assert abs(s[p] - e[p]) <= SKETCH_ALPHA * abs(e[p]) + 1e-12, (metric, p, s[p], e[p])


@pytest.mark.parametrize("seed", range(5))
def test_sketch_error_bound_and_merge(seed):
    rng = np.random.default_rng(seed)
    v = np.concatenate([rng.lognormal(-4, 2, 30_000), np.zeros(50), rng.uniform(0, 1e-3, 100)])
    w = rng.integers(1, 5, v.size)
    one, a, b = LogSketch(), LogSketch(), LogSketch()
    one.add(v, w)
    a.add(v[::2], w[::2])
    b.add(v[1::2], w[1::2])
    a.merge(b)
    assert np.array_equal(a.counts, one.counts) and a.zeros == one.zeros and a.count == one.count
    order = np.argsort(v)
    exact = describe(v[order], w[order])
    got = one.describe()
    for p in ("p50", "p90", "p95", "p99"):
        assert abs(got[p] - exact[p]) <= SKETCH_ALPHA * exact[p] + 1e-15


def test_spilled_column_keeps_values_after_release():
    col = Column(np.float64, np.nan, 16)
    col.data[:10] = np.arange(10)
    col.spill(1 << 20, 10)
    col.ensure(200_000)
    col.data[150_000] = 7.0
    col.release(200_000)  # pages dropped from memory, values kept in the file
    assert col.data[3] == 3.0 and col.data[150_000] == 7.0 and np.isnan(col.data[199_999])


def test_strings_read_like_lists(monkeypatch):
    monkeypatch.setattr(strings, "CHUNK", 4)
    ids = strings.StringColumn()
    values = [f"r{i}" if i % 3 else None for i in range(11)]
    for v in values:
        ids.append(v)
    assert list(ids) == values and ids[5] == values[5] and ids[-1] == values[-1] and ids[2:7] == values[2:7]
    assert ids.arrow(3, 10).to_pylist() == values[3:10]
    ids[1] = "changed"  # in a packed chunk
    assert ids[1] == "changed"
    reasons = strings.CodedStrings()
    for r in ["", "a", "", "b", "a"]:
        reasons.append(r)
    reasons[0] = "b"
    assert reasons == ["b", "a", "", "b", "a"] and reasons.arrow(1, 4).to_pylist() == ["a", "", "b"]
    assert reasons.counts(np.array([0, 1, 3, 4])) == {"a": 2, "b": 2}
