"""Which measured kernel-table rows the op-model benchmark and the engine-rate fit read
(``benchmarks/bench_kernels.py:table_frames``): each precision from the newest engine version
that measured it, so that a newer collector that re-measured only some precisions does not
drop the others."""

from __future__ import annotations

import pytest

from tests.benchscripts import load_benchmark

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _write(root, system, kind, backend, version, name, rows):
    d = root / system / kind / backend / version
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pandas(pd.DataFrame(rows)), d / f"{name}.parquet")


def _moe(dtype, tokens, latency, source="k"):
    return dict(kernel_source=source, moe_dtype=dtype, num_tokens=tokens, hidden_size=7168, latency=latency)


def test_each_precision_comes_from_the_newest_version_that_measured_it(tmp_path):
    bk = load_benchmark("bench_kernels")
    # rc23 re-measured only w4a8; rc20 measured w4a8 (other shapes) and nvfp4; rc9 bf16 and nvfp4
    _write(tmp_path, "b200_sxm", "moe", "trtllm", "1.3.0rc23", "moe_perf",
           [_moe("w4a8", 1, 0.01), _moe("w4a8", 2, 0.02), _moe("w4a8", 4, -1.0)])
    _write(tmp_path, "b200_sxm", "moe", "trtllm", "1.3.0rc20", "moe_perf",
           [_moe("w4a8", 1, 0.5), _moe("w4a8", 8, 0.5), _moe("nvfp4", 1, 0.03), _moe("nvfp4", 1, 0.04, "other")])
    _write(tmp_path, "b200_sxm", "moe", "trtllm", "1.3.0rc9", "moe_perf",
           [_moe("nvfp4", 1, 0.9), _moe("bfloat16", 16, 0.05)])
    # a table without precision columns: its newest version only
    _write(tmp_path, "b200_sxm", "gdn", "trtllm", "1.3.0rc20", "gdn_perf", [dict(kernel_source="k", seq_len=8, latency=0.2)])
    _write(tmp_path, "b200_sxm", "gdn", "trtllm", "1.3.0rc9", "gdn_perf", [dict(kernel_source="k", seq_len=16, latency=0.3)])

    frames = {(b, n): df for b, n, df in bk.table_frames(tmp_path, "b200_sxm")}
    moe = frames[("trtllm", "moe_perf")]
    by = {dt: g for dt, g in moe.groupby("moe_dtype")}
    # w4a8 from rc23 alone (rc20's other shapes of it left out), its non-positive latency dropped
    assert sorted(by["w4a8"].num_tokens) == [1, 2] and set(by["w4a8"].version) == {"1.3.0rc23"}
    # nvfp4 from rc20, both of its rows (a version's rows are all kept), not rc9's
    assert sorted(by["nvfp4"].latency) == [0.03, 0.04] and set(by["nvfp4"].version) == {"1.3.0rc20"}
    # bf16 only rc9 measured
    assert list(by["bfloat16"].latency) == [0.05] and set(by["bfloat16"].version) == {"1.3.0rc9"}
    assert list(frames[("trtllm", "gdn_perf")].seq_len) == [8]
    # only the tables asked for
    assert [n for _, n, _ in bk.table_frames(tmp_path, "b200_sxm", ("gdn_perf",))] == ["gdn_perf"]


def test_the_packaged_blackwell_tensorrt_llm_moe_tables_keep_their_nvfp4_rows():
    """TensorRT-LLM's newest B200 MoE table (1.3.0rc23) measures MXFP4 x MXFP8 only; its NVFP4,
    FP8 and BF16 rows, which the engine-rate fit reads for TensorRT-LLM on Blackwell, are rc20's."""
    pytest.importorskip("aiconfigurator_core")
    from pathlib import Path

    from aiconfigurator_core.sdk import perf_database

    bk = load_benchmark("bench_kernels")
    root = Path(perf_database.get_systems_paths()[0]) / "data"
    moe = {b: df for b, n, df in bk.table_frames(root, "b200_sxm", ("moe_perf",))}["trtllm"]
    dtypes = set(moe.moe_dtype)
    assert {"nvfp4", "fp8_block", "bfloat16", "w4a8_mxfp4_mxfp8"} <= dtypes
    for dt, g in moe.groupby("moe_dtype"):
        assert g.version.nunique() == 1, dt
