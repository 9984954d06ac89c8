"""benchmarks/dsa_modules.py prices a DSA decode module's table rows as the attention part of a
GLM-5 decode pass, per layer: its price follows the row's shape, and against SGLang's measured
B200 module (where the aiconfigurator-core extra is installed) it stays where docs/physics.md
says it is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.benchscripts import load_benchmark

pd = pytest.importorskip("pandas")


def _table(rows):
    return pd.DataFrame([dict(model="zai-org/GLM-5-FP8", num_heads=h, gemm_type="fp8_block", kv_cache_dtype="fp8",
                              batch_size=b, step=ctx, latency=0.1) for h, b, ctx in rows])


def test_price_follows_batch_context_and_tensor_parallelism():
    dm = load_benchmark("dsa_modules")
    df = _table([(8, 1, 1024), (8, 64, 1024), (8, 64, 8192), (64, 1, 1024), (3, 1, 1024)])
    p = dm.price(df, "b200_sxm", "sglang")
    assert np.isnan(p[4])  # 3 heads per GPU is no tensor-parallel split of GLM-5's 64
    assert p[0] < p[1] < p[2]  # more requests, then more context per request: more time
    assert p[0] < p[3]  # one GPU holds all 64 heads' projections: slower than a TP-8 rank
    assert 20e-6 < p[0] < 200e-6  # a layer's attention at one request: tens of microseconds


def test_sglang_b200_module_priced_as_documented():
    pytest.importorskip("aiconfigurator_core")
    from aiconfigurator_core.sdk import perf_database

    dm = load_benchmark("dsa_modules")
    root = Path(perf_database.get_systems_paths()[0]) / "data"
    tables = {(s, e): df for s, e, df in dm._rows(root)}
    df = tables[("b200_sxm", "sglang")].reset_index(drop=True)
    pred = dm.price(df, "b200_sxm", "sglang")
    ok = np.isfinite(pred) & (df.step.values >= 256) & (df.step.values <= 8192) & (df.batch_size.values <= 256)
    ratio = np.median(pred[ok] / (df.latency.values[ok] * 1e-3))
    assert 0.75 < ratio < 0.95  # docs/physics.md: 0.84
