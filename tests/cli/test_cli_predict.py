"""The `servesim predict` command end to end: outputs, determinism and error handling."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from servesim.cli import main
from conftest import shared_file

SMALL = {
    "seed": 7,
    "workload": {
        "kind": "synthetic",
        "num_requests": 150,
        "arrival": {"process": "poisson", "rate": 20.0},
        "input": {"dist": "uniform", "low": 200, "high": 3000},
        "output": {"dist": "uniform", "low": 5, "high": 200},
        "prefix": {"num_groups": 4, "length": 1024, "share": 0.5},
    },
    "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "workers": 2},
}

REQUEST_FIELDS = {
    "request_id", "session_id", "turn", "worker", "warmup", "arrival_s", "first_scheduled_s", "first_token_s",
    "second_token_s", "last_token_s", "finish_s", "input_length", "output_length", "generated_tokens",
    "cached_tokens", "host_cached_tokens", "ttft_s", "ttst_s", "tpot_s", "mean_itl_s", "e2e_s", "queue_s",
    "retractions", "status", "reason",
}
TIMESERIES_FIELDS = {"time_s", "worker", "running", "waiting", "kv_used_tokens", "kv_usage", "cache_hit_ratio",
                     "tokens_per_pass", "passes"}


def write_config(tmp_path: Path, cfg: dict, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_two_identical_runs_write_identical_files(tmp_path):
    cfg = write_config(tmp_path, SMALL)
    assert main(["predict", str(cfg), "--out", str(tmp_path / "a"), "--quiet"]) == 0
    assert main(["predict", str(cfg), "--out", str(tmp_path / "b"), "--quiet"]) == 0
    for name in ("requests.parquet", "timeseries.parquet", "prediction.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    # A different seed changes the workload, hence the file.
    assert main(["predict", str(cfg), "--out", str(tmp_path / "c"), "--quiet", "--set", "seed=8"]) == 0
    assert (tmp_path / "a" / "requests.parquet").read_bytes() != (tmp_path / "c" / "requests.parquet").read_bytes()


def test_outputs_have_every_documented_field(tmp_path):
    cfg = write_config(tmp_path, SMALL)
    assert main(["predict", str(cfg), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    req = pq.read_table(tmp_path / "o" / "requests.parquet")
    assert set(req.column_names) >= REQUEST_FIELDS
    assert req.num_rows == 150
    ts = pq.read_table(tmp_path / "o" / "timeseries.parquet")
    assert set(ts.column_names) == TIMESERIES_FIELDS
    doc = json.loads((tmp_path / "o" / "prediction.json").read_text())
    assert set(doc) >= {"summary", "config", "versions", "deployment_resolved"}
    lat = doc["summary"]["latency"]
    for metric in ("ttft_ms", "ttst_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        assert set(lat[metric]) >= {"mean", "min", "max", "p50", "p90", "p95", "p99", "std"}
    assert doc["summary"]["requests"]["completed"] == 150
    assert doc["summary"]["cache"]["prefix_reuse_ratio"] > 0.1
    workers = doc["summary"]["workers"]
    assert [w["worker"] for w in workers] == [0, 1]
    assert sum(w["requests"] for w in workers) == 150
    assert all(0 < w["utilization"] <= 1 and w["passes"] > 0 and w["tokens"] > 0 for w in workers)
    fleet = doc["summary"]["fleet"]
    assert fleet["gpus"] == 2
    assert fleet["gpu_hours"] == pytest.approx(2 * doc["summary"]["run"]["sim_end_s"] / 3600)


def test_json_format_prints_the_summary(tmp_path, capsys):
    cfg = write_config(tmp_path, SMALL)
    assert main(["predict", str(cfg), "--no-files", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["requests"]["total"] == 150
    assert doc["host"]["wall_s"] > 0


def test_table_summary_mentions_key_metrics(tmp_path, capsys):
    cfg = write_config(tmp_path, SMALL)
    assert main(["predict", str(cfg), "--no-files"]) == 0
    out = capsys.readouterr().out
    for word in ("TTFT", "TPOT", "ITL", "Prefix-cache reuse", "per GPU", "Completed", "Retractions"):
        assert word in out


BAD_ROWS = [
    ('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n'
     '{"timestamp": 5, "input_length": 10, "output_l', 2, "invalid JSON"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n'
     '{"timestamp": 5, "input_length": 10, "output_length": -4, "hash_ids": [2]}\n', 2, "output_length"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n'
     '{"timestamp": 5, "output_length": 4, "hash_ids": [2]}\n', 2, "input_length"),
]


@pytest.mark.parametrize("text,line,field", BAD_ROWS)
def test_malformed_trace_stops_with_line_and_field(tmp_path, capsys, text, line, field):
    trace = tmp_path / "bad.jsonl"
    trace.write_text(text)
    cfg = write_config(tmp_path, {"workload": {"kind": "trace", "path": "bad.jsonl"}})
    out = tmp_path / "out"
    out.mkdir()
    (out / "prediction.json").write_text("{}")  # the previous run's outputs: left untouched
    assert main(["predict", str(cfg), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"bad.jsonl:{line}" in err and field in err
    assert (out / "prediction.json").read_text() == "{}"
    assert sorted(p.name for p in out.iterdir()) == ["prediction.json"]
    assert [p.name for p in tmp_path.iterdir() if "servesim-" in p.name] == []  # no temporary folder left


@pytest.mark.parametrize("override,needle", [
    ("deployment.workerz=2", "deployment.workerz: unknown key"),
    ("workload.arrival.rate=-1", "rate"),
    ("deployment.tp=3", "deployment.tp: 3 does not divide the 32 attention heads"),
    ("deployment.model=meta-llama/Llama-3.1-405B", "does not fit"),
    ("deployment.gpu=tpu_v9", "deployment.gpu"),
    ("deployment.engine.page_size=0", "deployment.engine"),
])
def test_bad_config_values_name_the_key(tmp_path, capsys, override, needle):
    cfg = write_config(tmp_path, SMALL)
    assert main(["predict", str(cfg), "--no-files", "--set", override]) == 2
    err = capsys.readouterr().err
    assert needle in err


def test_default_example_runs(tmp_path, capsys):
    assert main(["predict", "--out", str(tmp_path / "d"), "--quiet"]) == 0
    doc = json.loads((tmp_path / "d" / "prediction.json").read_text())
    assert doc["summary"]["requests"]["unfinished"] == 0


def test_mooncake_conversation_on_eight_sglang_workers(tmp_path):
    trace = shared_file("traces", "mooncake_conversation.jsonl")
    cfg = write_config(tmp_path, {
        "workload": {"kind": "trace", "path": str(trace)},
        "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm", "workers": 8,
                       "router": "round_robin", "engine": {"name": "sglang"}},
    })
    assert main(["predict", str(cfg), "--out", str(tmp_path / "m"), "--quiet"]) == 0
    doc = json.loads((tmp_path / "m" / "prediction.json").read_text())
    counts = doc["summary"]["requests"]
    assert counts["total"] == 12031
    assert counts["completed"] + counts["rejected"] + counts["unfinished"] == 12031
    assert doc["summary"]["cache"]["prefix_reuse_ratio"] > 0
    req = pq.read_table(tmp_path / "m" / "requests.parquet")
    assert req.num_rows == 12031 and set(req.column_names) >= REQUEST_FIELDS
    assert set(req.column("worker").to_pylist()) == set(range(8))


def test_requests_file_written_in_row_groups_holds_the_same_table(tmp_path):
    """requests.parquet is written a slice at a time; the slices must add up to the whole table."""
    from servesim.api import predict
    from servesim.report.files import request_table, write_requests

    pred = predict({**SMALL, "deployment": {**SMALL["deployment"], "engine": {"name": "vllm"}}})
    rec = pred.recorder
    path = tmp_path / "requests.parquet"
    write_requests(rec, path, row_group=16)
    written = pq.read_table(path)
    assert pq.ParquetFile(path).num_row_groups == -(-rec.size // 16)
    _assert_same_table(written, request_table(rec))
    _assert_same_table(written.slice(40, 16), request_table(rec, 40, 56))
    assert not list(tmp_path.glob("*.part"))
    # and against the recorder itself, not only against request_table
    import numpy as np

    assert written.column("request_id").to_pylist() == rec.request_id
    assert np.array_equal(written.column("arrival_s").to_numpy(), rec.column("arrival"))
    assert np.array_equal(written.column("generated_tokens").to_numpy(), rec.column("generated"))
    assert written.column("status").to_pylist() == ["completed"] * rec.size


def _assert_same_table(a, b):
    """Equal schema and values, NaN equal to NaN (``Table.equals`` treats NaN as unequal)."""
    import numpy as np

    assert a.schema == b.schema
    for name in a.column_names:
        x, y = a.column(name).to_pylist(), b.column(name).to_pylist()
        if a.schema.field(name).type in ("double", "float"):
            assert np.array_equal(np.array(x, dtype=float), np.array(y, dtype=float), equal_nan=True), name
        else:
            assert x == y, name


def test_a_failed_requests_file_leaves_no_short_file(tmp_path):
    from servesim.api import predict
    from servesim.report.files import write_requests

    rec = predict(SMALL).recorder
    rec.request_id[100] = "\ud800"  # cannot be encoded: the second row group fails
    with pytest.raises(UnicodeEncodeError):
        write_requests(rec, tmp_path / "requests.parquet", row_group=64)
    assert list(tmp_path.iterdir()) == []


def test_arrow_columns_equal_what_pyarrow_builds():
    """report.arrow builds columns from buffers (pyarrow.array would import pandas): same arrays."""
    import numpy as np
    import pyarrow as pa

    from servesim.report.arrow import coded_string_array, numeric_array, string_array, table

    rng = np.random.default_rng(0)
    cols = {"f": rng.random(37), "i": rng.integers(-5, 5, 37), "i32": rng.integers(0, 9, 37).astype(np.int32),
            "b": rng.random(37) > 0.5, "strided": rng.random(74)[::2]}
    for name, col in cols.items():
        assert numeric_array(col).equals(pa.array(col)), name
    assert numeric_array(np.array([1.5, -2.0], dtype=">f8")).equals(pa.array([1.5, -2.0]))  # big-endian
    assert numeric_array(np.zeros(0, dtype=np.int64)).equals(pa.array(np.zeros(0, dtype=np.int64)))
    with pytest.raises(ValueError, match="one dimension"):
        numeric_array(np.zeros((2, 2)))
    with pytest.raises(TypeError, match="dtype object"):
        numeric_array(np.array(["a"], dtype=object))
    strings = ["r1", None, "", "ünïcode", "x" * 100, None]
    assert string_array(strings).equals(pa.array(strings, type=pa.string()))
    assert string_array([]).equals(pa.array([], type=pa.string()))
    assert table(cols).equals(pa.table(cols))
    values = ["", "rejected: prompt too long", "ünïcode", "x"]
    codes = rng.integers(0, len(values), 101).astype(np.int32)
    want = pa.array([values[c] for c in codes], type=pa.string())
    assert coded_string_array(values, codes).equals(want)
    assert coded_string_array(values, codes[:0]).equals(pa.array([], type=pa.string()))
    assert coded_string_array([""], np.zeros(3, np.int32)).equals(pa.array(["", "", ""]))


def _predict_in_a_fresh_process_without(tmp_path, module: str) -> None:
    """``servesim predict`` writing its files in a new interpreter, asserting that it never
    imported ``module``."""
    import subprocess
    import sys

    cfg = write_config(tmp_path, SMALL)
    code = ("import sys; from servesim.cli import main; "
            f"rc = main(['predict', {str(cfg)!r}, '--out', {str(tmp_path / 'o')!r}, '--quiet']); "
            f"assert rc == 0; assert {module!r} not in sys.modules, '{module} was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_writing_output_files_does_not_import_pandas(tmp_path):
    """pyarrow.array imports pandas where installed (~45 MB); the output files must not need it."""
    pytest.importorskip("pandas")  # without pandas there is nothing to import by accident
    _predict_in_a_fresh_process_without(tmp_path, "pandas")
    assert (tmp_path / "o" / "timeseries.parquet").exists()


def test_writing_output_files_does_not_import_pyarrow_compute(tmp_path):
    """The request table's coded string columns are gathered with numpy: ``Array.take`` would
    import pyarrow.compute (~0.1 s of every run that writes its files)."""
    _predict_in_a_fresh_process_without(tmp_path, "pyarrow.compute")
    assert (tmp_path / "o" / "requests.parquet").exists()


def test_summary_names_only_the_files_written(tmp_path, capsys):
    cfg = dict(SMALL, output={"requests": False, "timeseries": False, "kv_events": True})
    out = tmp_path / "run"
    assert main(["predict", str(write_config(tmp_path, cfg)), "--out", str(out)]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("Wrote")][-1]
    assert line == f"Wrote {out / 'prediction.json'}, kv_events.jsonl"
    assert sorted(p.name for p in out.iterdir()) == ["kv_events.jsonl", "prediction.json"]


def test_engine_options_without_a_name_are_the_default_engines():
    """SMALL names no engine: an override of one SGLang option must not need `name` too."""
    from servesim.config import load_config

    cfg = load_config(SMALL, ["deployment.engine.schedule_policy=lpm"])
    assert cfg.deployment.engine.name == "sglang" and cfg.deployment.engine.schedule_policy == "lpm"
    # a vLLM option without the name is still an SGLang config, and says so
    from servesim.errors import ConfigError

    with pytest.raises(ConfigError, match="max_num_batched_tokens"):
        load_config(SMALL, ["deployment.engine.max_num_batched_tokens=4096"])


def test_overrides_leave_the_callers_mapping_alone():
    import copy

    from servesim.config import load_config

    before = copy.deepcopy(SMALL)
    load_config(SMALL, ["deployment.engine.schedule_policy=lpm", "workload.arrival.rate=3"])
    assert SMALL == before


def test_unusable_output_folders_and_config_files_are_clear_errors(tmp_path, capsys):
    cfg = str(write_config(tmp_path, SMALL))
    a_file = tmp_path / "afile"
    a_file.write_text("x")
    cases = [
        (["--out", str(a_file)], "is a file, expected a folder"),
        (["--out", ""], "expected an output folder name"),
        (["--out", str(a_file / "sub")], "cannot write the output folder"),
    ]
    for extra, needle in cases:
        assert main(["predict", cfg, "--quiet", *extra]) == 2
        assert needle in capsys.readouterr().err
    assert a_file.read_text() == "x"
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    assert main(["predict", str(binary)]) == 2
    assert "is not UTF-8 text" in capsys.readouterr().err


@pytest.mark.parametrize("given, expected", [(None, "1"), ("3", "3")])
def test_cli_keeps_blas_to_one_thread_unless_told(given, expected):
    """The command sets OPENBLAS_NUM_THREADS=1 before numpy loads (its idle BLAS threads only
    spin, about a tenth of a default run's CPU); a value the user set is kept."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    code = "import sys, os, servesim.cli; print(os.environ['OPENBLAS_NUM_THREADS'], 'numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [expected, "True"]
