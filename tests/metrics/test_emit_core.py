"""The compiled token emission equals the recorder's numpy emission.

Two recorders, one on ``metrics/_emit_core.pyx`` and one forced to Python, get the same
random emissions — single passes (some with speculative tokens) and stretches, over random
subsets of requests, some of them warm-up requests, with times on a coarse grid so that a
pass's gaps take one, two or many values — and must end with identical columns and
identical inter-token-gap samples.  A tiny flush threshold exercises the chunking.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.compiled import compiled_module
from servesim.metrics.recorder import RequestRecorder
from simharness import python_versions

pytestmark = pytest.mark.skipif(compiled_module("metrics._emit_core") is None, reason="compiled core not built")

COLUMNS = ("first_token", "second_token", "last_token", "emissions", "generated")


def recorders(n: int, warm: list[bool]) -> tuple[RequestRecorder, RequestRecorder]:
    with python_versions():
        ref = RequestRecorder()
    fast = RequestRecorder()
    assert ref._kernel is None and fast._kernel is not None
    for rec in (ref, fast):
        rec._flush_at = 3  # flush in small chunks (the compiled emitter's buffers take it when built)
        rec._new_emitter()
        for i in range(n):
            rec.register(i, f"r{i}", None, 0, 10, 100, warm[i])
    return ref, fast


def run(seed: int, n: int) -> None:
    rng = random.Random(seed)
    warm = [rng.random() < 0.3 for _ in range(n)]
    ref, fast = recorders(n, warm)
    t = 0.0
    for _ in range(rng.randint(1, 30)):
        idx = np.array(sorted(rng.sample(range(n), rng.randint(0, n))), dtype=np.int64)
        if rng.random() < 0.5:
            t += rng.choice([0.25, 0.5, 0.75, 1.0])
            if rng.random() < 0.2:
                tokens = np.array([rng.randint(1, 4) for _ in idx], dtype=np.int64)
                ref.emit(idx, t, tokens)
                fast.emit(idx, t, tokens)
            else:
                ref.emit(idx, t)
                fast.emit(idx, t)
        else:
            ends = t + np.cumsum([rng.choice([0.25, 0.5, 1.0 / 3.0]) for _ in range(rng.randint(1, 5))])
            t = float(ends[-1])
            ref.emit_stretch(idx, ends)
            fast.emit_stretch(idx, ends)
    for col in COLUMNS:
        assert np.array_equal(ref.column(col), fast.column(col), equal_nan=True), col
    for a, b in ((ref.itl, fast.itl), (ref.itl_warmup, fast.itl_warmup)):
        (va, wa), (vb, wb) = a.arrays(), b.arrays()
        assert va.tolist() == vb.tolist() and wa.tolist() == wb.tolist()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 12))
def test_compiled_emission_equals_numpy_emission(seed: int, n: int) -> None:
    run(seed, n)


def test_bad_index_changes_nothing() -> None:
    _, fast = recorders(3, [False] * 3)
    fast.emit(np.array([0, 1], dtype=np.int64), 1.0)
    before = [fast.column(c).copy() for c in COLUMNS]
    with pytest.raises(IndexError, match="request index 5000 outside"):
        fast.emit(np.array([1, 5000], dtype=np.int64), 2.0)
    assert all(np.array_equal(b, fast.column(c), equal_nan=True) for b, c in zip(before, COLUMNS))


def test_other_index_dtypes_are_accepted() -> None:
    ref, fast = recorders(4, [False, True, False, False])
    for rec in (ref, fast):
        rec.emit(np.array([0, 1, 2], dtype=np.int32), 1.0)
        rec.emit_stretch(np.array([0, 1, 3], dtype=np.intp), np.array([2.0, 2.5, 3.0]))
    for col in COLUMNS:
        assert np.array_equal(ref.column(col), fast.column(col), equal_nan=True), col


def test_columns_growing_between_emissions() -> None:
    """Registering past the columns' capacity replaces them; the compiled emitter follows."""
    with python_versions():
        ref = RequestRecorder()
    fast = RequestRecorder()
    rng = random.Random(1)
    t, n = 0.0, 0
    for _ in range(12):
        for rec in (ref, fast):  # registrations interleaved with emissions, warm-up ones late
            for i in range(n, n + 400):
                rec.register(i, f"r{i}", None, 0, 10, 100, i > 3000 and i % 7 == 0)
        n += 400
        for _ in range(5):
            idx = np.array(sorted(rng.sample(range(n), 50)), dtype=np.int64)
            ends = t + np.cumsum([rng.choice([0.25, 0.5]) for _ in range(rng.randint(1, 4))])
            t = float(ends[-1])
            ref.emit_stretch(idx, ends)
            fast.emit_stretch(idx, ends)
    assert fast.cols["emissions"].data.size > 1024  # grew at least once
    for col in COLUMNS:
        assert np.array_equal(ref.column(col), fast.column(col), equal_nan=True), col
    for a, b in ((ref.itl, fast.itl), (ref.itl_warmup, fast.itl_warmup)):
        (va, wa), (vb, wb) = a.arrays(), b.arrays()
        assert va.tolist() == vb.tolist() and wa.tolist() == wb.tolist() and wa.size
