"""The recorder's stretch commit equals pass-by-pass emission; ``generated`` counts every token."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.metrics.recorder import RequestRecorder


def recorder(n: int, warm: list[bool]) -> RequestRecorder:
    rec = RequestRecorder()
    for i in range(n):
        rec.register(i, f"r{i}", None, 0, 10, 100, warm[i])
    return rec


def itl(rec: RequestRecorder, warmup: bool = False) -> dict[float, int]:
    v, w = (rec.itl_warmup if warmup else rec.itl).arrays()
    out: dict[float, int] = {}
    for x, c in zip(v.tolist(), w.tolist()):
        out[x] = out.get(x, 0) + int(c)
    return out


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 6), data=st.data())
def test_emit_stretch_equals_emits(n, data):
    warm = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    prior = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))  # emissions before
    gaps = data.draw(st.lists(st.sampled_from([0.5, 0.25, 0.125, 1.0]), min_size=1, max_size=6))
    a, b = recorder(n, warm), recorder(n, warm)
    t = 0.0
    for round_ in range(max(prior)):
        idx = np.array([i for i in range(n) if prior[i] > round_], dtype=np.int64)
        t += 1.0
        a.emit(idx, t)
        b.emit(idx, t)
    idx = np.arange(n, dtype=np.int64)
    ends = t + np.cumsum(gaps)
    a.emit_stretch(idx, ends)
    for e in ends:
        b.emit(idx, float(e))
    for col in ("first_token", "second_token", "last_token", "emissions", "generated"):
        assert np.array_equal(a.column(col), b.column(col), equal_nan=True), col
    assert itl(a) == itl(b)
    assert itl(a, True) == itl(b, True)


def test_generated_counts_speculative_tokens():
    rec = recorder(3, [False] * 3)
    rec.emit(np.array([0, 1, 2]), 1.0)                      # first tokens
    rec.emit(np.array([0, 2]), 2.0, np.array([3, 1]))       # request 0 accepts two drafts
    rec.emit_stretch(np.array([1, 2]), np.array([3.0, 4.0]))
    assert rec.column("emissions").tolist() == [2, 3, 4]
    assert rec.column("generated").tolist() == [4, 3, 4]
    assert rec.column("second_token").tolist() == [2.0, 3.0, 2.0]
    # gaps: request 0: 1→2; request 1: 1→3, 3→4; request 2: 1→2, 2→3, 3→4
    assert itl(rec) == {1.0: 5, 2.0: 1}
