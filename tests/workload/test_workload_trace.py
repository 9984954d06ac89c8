"""Mooncake trace reader: validation messages, window/speedup/limit, sessions, streaming."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.errors import WorkloadError
from servesim.workload.request import output_block_id
from servesim.workload.trace import read_mooncake

DATA = Path(__file__).parents[2].parent / "shared" / "data"


def write(tmp_path: Path, rows: list, name: str = "t.jsonl") -> Path:
    """Write rows (dicts are JSON-encoded, strings written verbatim) one per line."""
    path = tmp_path / name
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def row(ts=0, inp=1000, out=10, **kw):
    r = {"timestamp": ts, "input_length": inp, "output_length": out, "hash_ids": [1, 2]}
    r.update(kw)
    return r


def read_all(path: Path, **kw):
    return list(read_mooncake(path, **kw))


def test_reads_basic_fields(tmp_path):
    path = write(tmp_path, [row(0), row(1500, request_id="abc"), "", row(2500, request_id=7)])
    reqs = read_all(path)
    assert [r.index for r in reqs] == [0, 1, 2]
    assert [r.arrival for r in reqs] == [0.0, 1.5, 2.5]
    assert [r.request_id for r in reqs] == ["L1", "abc", "7"]
    assert reqs[0].hash_ids == (1, 2)
    assert reqs[0].input_length == 1000 and reqs[0].output_length == 10
    assert all(r.after is None and r.block_size == 512 for r in reqs)


@pytest.mark.parametrize(
    "bad_line, field, fragment",
    [
        ('{"timestamp": 0, "input_length": 100, "output_len', None, "invalid JSON"),
        (row(5, out=-3), "output_length", "expected an integer from 1 to 100,000,000, got -3"),
        (row(5, out=0), "output_length", "got 0"),
        (row(5, inp=10**30), "input_length", "expected an integer from 1 to 100,000,000"),
        (row(5, out=2**63), "output_length", "got 9223372036854775808"),
        ({"timestamp": 5, "input_length": 100}, "output_length", "missing"),
        ({"input_length": 100, "output_length": 1}, "timestamp", "missing"),
        (row(5, inp=12.5), "input_length", "got 12.5"),
        (row(5, inp="100"), "input_length", 'got "100"'),
        (row(5, out=True), "output_length", "got true"),
        (row(-1), "timestamp", "got -1"),
        (row(5, inp=1025), "hash_ids", "expected 3 block ids"),
        (row(5, inp=100), "hash_ids", "expected 1 block ids"),
        (row(5, hash_ids=[1, -2]), "hash_ids[1]", "integer >= 0"),
        (row(5, hash_ids="abc"), "hash_ids", "list of integers"),
        (row(5, session_id=[1]), "session_id", "a string or an integer"),
        ("[1, 2]", None, "expected a JSON object"),
    ],
)
def test_bad_rows_name_line_and_field(tmp_path, bad_line, field, fragment):
    path = write(tmp_path, [row(0), row(1), bad_line, row(9)])
    with pytest.raises(WorkloadError) as err:
        read_all(path)
    msg = str(err.value)
    assert f"{path}:3:" in msg
    if field is not None:
        assert f"field '{field}'" in msg
    assert fragment in msg


def test_integral_float_lengths_are_accepted(tmp_path):
    path = write(tmp_path, [row(0, inp=1000.0, out=12.0)])
    (req,) = read_all(path)
    assert req.input_length == 1000 and isinstance(req.input_length, int)
    assert req.output_length == 12


def test_backwards_timestamp_names_both_lines(tmp_path):
    path = write(tmp_path, [row(0), row(100), row(50)])
    with pytest.raises(WorkloadError) as err:
        read_all(path)
    msg = str(err.value)
    assert f"{path}:3:" in msg and "field 'timestamp'" in msg and "line 2" in msg


def test_missing_file(tmp_path):
    with pytest.raises(WorkloadError, match="nope.jsonl: trace file not found"):
        read_mooncake(tmp_path / "nope.jsonl")


def test_block_size_changes_expected_ids(tmp_path):
    path = write(tmp_path, [row(0, inp=100, hash_ids=[1, 2, 3, 4])])
    assert read_all(path, block_size=32)[0].hash_ids == (1, 2, 3, 4)
    with pytest.raises(WorkloadError, match="expected 1 block ids"):
        read_all(path, block_size=512)


def test_speedup_window_limit(tmp_path):
    path = write(tmp_path, [row(t) for t in (0, 1000, 2000, 3000, 4000, 5000)])
    assert [r.arrival for r in read_all(path, speedup=2.0)] == [0, 0.5, 1, 1.5, 2, 2.5]
    reqs = read_all(path, start_ms=1000, end_ms=3000)
    assert [r.arrival for r in reqs] == [0.0, 1.0, 2.0]
    assert [r.index for r in reqs] == [0, 1, 2]
    assert [r.request_id for r in reqs] == ["L2", "L3", "L4"]
    reqs = read_all(path, start_ms=1000, speedup=4.0, limit=2)
    assert [r.arrival for r in reqs] == [0.0, 0.25]


def test_end_of_window_stops_reading(tmp_path):
    # A malformed line after the window is never parsed: the reader stops at the first
    # row past end_ms when no session can still have later turns.
    path = write(tmp_path, [row(0), row(10), row(20), "garbage"])
    assert len(read_all(path, end_ms=15)) == 2


def test_reader_is_lazy(tmp_path):
    path = write(tmp_path, [row(0), row(1), "{broken"])
    it = read_mooncake(path)
    first = next(it)
    assert first.index == 0
    assert next(it).index == 1
    with pytest.raises(WorkloadError, match=":3: invalid JSON"):
        next(it)
    # limit stops before the malformed line
    assert len(read_all(path, limit=2)) == 2


def test_missing_hash_ids_get_unique_negative_ids(tmp_path):
    path = write(
        tmp_path,
        [
            {"timestamp": 0, "input_length": 1100, "output_length": 3},
            {"timestamp": 1, "input_length": 10, "output_length": 3},
            row(2, hash_ids=[0, 5]),
        ],
    )
    a, b, c = read_all(path)
    assert a.hash_ids == (-1, -2, -3) and b.hash_ids == (-4,)
    own = set(a.hash_ids) | set(b.hash_ids)
    assert not own & set(c.hash_ids)
    assert all(i > output_block_id(0, 0) for i in own)


def test_sessions(tmp_path):
    path = write(
        tmp_path,
        [
            row(0, session_id="a"),
            row(100, session_id=5),
            row(999, session_id="a", delay=2000),  # timestamp ignored
            {"input_length": 3000, "output_length": 4, "session_id": "a", "delay": 500,
             "hash_ids": [1, 2, 3, 4, 5, 6]},
            row(200),
        ],
    )
    reqs = read_all(path, speedup=2.0)
    assert [r.session_id for r in reqs] == ["a", "5", "a", "a", None]
    assert [r.turn for r in reqs] == [0, 0, 1, 2, 0]
    assert [r.after for r in reqs] == [None, None, 0, 2, None]
    assert reqs[2].delay == 1.0 and reqs[3].delay == 0.25
    assert math.isnan(reqs[2].arrival) and math.isnan(reqs[3].arrival)
    assert reqs[4].arrival == 0.1


def test_later_turn_needs_delay(tmp_path):
    path = write(tmp_path, [row(0, session_id="a"), row(5, session_id="a")])
    with pytest.raises(WorkloadError) as err:
        read_all(path)
    assert f"{path}:2:" in str(err.value) and "field 'delay'" in str(err.value)


def test_window_keeps_or_drops_whole_sessions(tmp_path):
    path = write(
        tmp_path,
        [
            row(0, session_id="early"),
            row(1000, session_id="kept"),
            row(0, session_id="early", delay=1),
            row(5000),  # past the window
            row(0, session_id="kept", delay=1),
        ],
    )
    reqs = read_all(path, start_ms=500, end_ms=2000)
    assert [(r.session_id, r.turn, r.after) for r in reqs] == [("kept", 0, None), ("kept", 1, 0)]


def test_gzip(tmp_path):
    path = tmp_path / "t.jsonl.gz"
    with gzip.open(path, "wt") as fh:
        fh.write(json.dumps(row(0)) + "\n" + json.dumps(row(3)) + "\n")
    assert [r.arrival for r in read_all(path)] == [0.0, 0.003]


@pytest.mark.skipif(not DATA.is_dir(), reason="shared data not available")
def test_real_conversation_trace():
    reqs = read_mooncake(DATA / "traces" / "mooncake_conversation.jsonl")
    n = 0
    last = 0.0
    total_in = 0
    for r in reqs:
        assert r.index == n and r.arrival >= last
        last = r.arrival
        total_in += r.input_length
        n += 1
    assert n == 12031
    assert abs(total_in / n - 12035) < 1


def test_unreadable_files_are_workload_errors_naming_the_file(tmp_path):
    import gzip

    good = b"".join(json.dumps(row(i)).encode() + b"\n" for i in range(3000))
    fake = tmp_path / "plain.jsonl.gz"
    fake.write_bytes(good)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(good)[: len(gzip.compress(good)) // 2])
    for path in (fake, cut):
        with pytest.raises(WorkloadError, match=f"{path}: not a complete gzip file"):
            read_all(path)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(json.dumps(row(0)).encode() + b"\n" + b'{"timestamp": 1, "request_id": "\xe9"}\n')
    with pytest.raises(WorkloadError, match=f"{latin}:2: not UTF-8 text"):
        read_all(latin)


def test_a_byte_order_mark_is_dropped(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(row(0)).encode() + b"\n" + json.dumps(row(1)).encode() + b"\n")
    assert [r.arrival for r in read_all(path)] == [0.0, 0.001]


def test_old_mac_line_endings_are_lines(tmp_path):
    path = tmp_path / "cr.jsonl"
    path.write_bytes(b"\r".join(json.dumps(row(i)).encode() for i in range(3)) + b"\r")
    assert [r.arrival for r in read_all(path)] == [0.0, 0.001, 0.002]


# -- the typed decoder and the Python checks agree ------------------------------------------
#: Per field: values both ways accept (None: the field is left out), then values to refuse or
#: that only the Python checks take (integral floats, integers past 64 bits).
_GOOD = {
    "timestamp": [0, 5, 7.5, 12, 40.25],
    "input_length": [1, 3, 600, 256, 300],
    "output_length": [1, 9, 4],
    "hash_ids": [None, None, [0], [4, 5, 6], [7, 8]],
    "session_id": [None, None, "a", "b", 7],
    "request_id": [None, "r", 3, "", 0],
    "delay": [None, 0, 2, 2.5],
}
_ODD = {
    "timestamp": [None, -1, "3", True, 1e300, 10**30, 12.0],
    "input_length": [600.0, 0, -2, 2.5, True, "4", None, 10**9, 10**30],
    "output_length": [9.0, 0, 1.5, False, None],
    "hash_ids": [[1.0, 2], [-1, 2], [True], "x", [2**70, 1], [1, 2]],
    "session_id": [7.0, True, [1], 10**30],
    "request_id": [1.5, [2], 10**30],
    "delay": [-1, "1", 10**30],
}


def _outcome(path: Path) -> object:
    try:
        return [(r.index, r.request_id, r.arrival, r.input_length, r.output_length, r.hash_ids, r.session_id,
                 r.turn, r.after, r.delay) for r in read_all(path, block_size=256)]
    except WorkloadError as exc:
        return str(exc)


_PICK = st.tuples(st.booleans(), st.integers(0, 30))  # (odd?, which)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.fixed_dictionaries({k: _PICK for k in _GOOD}), st.integers(0, 12)),
                min_size=1, max_size=8))
def test_typed_decoder_equals_python_checks(tmp_path_factory, picks):
    """Random rows, mostly good, some with one odd field: the typed decoder plus the Python
    checks (the reader) give the same requests, or the same error, as the Python checks alone."""
    import servesim.workload.trace as trace

    rows = []
    for pick, odd_field in picks:
        row_ = {}
        for j, (field, (odd, which)) in enumerate(pick.items()):
            pool = _ODD[field] if odd and j == odd_field else _GOOD[field]
            value = pool[which % len(pool)]
            if value is not None:
                row_[field] = value
        rows.append(row_)
    path = write(tmp_path_factory.mktemp("typed"), rows)
    assert trace.msgspec is not None
    typed = _outcome(path)
    saved, trace.msgspec = trace.msgspec, None
    try:
        checked = _outcome(path)
    finally:
        trace.msgspec = saved
    assert repr(typed) == repr(checked)  # repr: NaN arrivals of later turns compare equal
