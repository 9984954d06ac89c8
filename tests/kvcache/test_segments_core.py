"""The compiled segment arithmetic returns what the Python functions return.

``kvcache/_segments_core.pyx`` replaces four functions of :mod:`servesim.kvcache.segments`
(the radix cache's hot arithmetic); on random units, segment lists and read positions
each must give the Python version's result exactly.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.compiled import compiled_module
from servesim.kvcache.segments import PYTHON_VERSIONS

core = compiled_module("kvcache._segments_core")
pytestmark = pytest.mark.skipif(core is None, reason="compiled core not built")

block_ids = st.integers(-(2**62), 2**62)
units = st.lists(st.tuples(st.sampled_from([1, 2, 3, 7]) | block_ids, st.integers(0, 600)), max_size=8)


def segments(draw_units: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """Segments as the tree holds them: a start inside each block, a non-empty range."""
    out = []
    for bid, n in draw_units:
        start = n // 3
        out.append((bid, start, max(n, start + 1)))
    return out


@settings(max_examples=300, deadline=None)
@given(units, st.none() | st.integers(-5, 3000))
def test_units_to_segments(us, n_tokens):
    assert core.units_to_segments(us, n_tokens) == PYTHON_VERSIONS["units_to_segments"](us, n_tokens)
    assert core.units_to_segments(tuple(us)) == PYTHON_VERSIONS["units_to_segments"](tuple(us))


@settings(max_examples=300, deadline=None)
@given(units)
def test_segments_tokens(us):
    segs = segments(us)
    assert core.segments_tokens(segs) == PYTHON_VERSIONS["segments_tokens"](segs)


@settings(max_examples=500, deadline=None)
@given(units, units, st.data())
def test_common_prefix_and_advance(key_units, input_units, data):
    key = segments(key_units)
    # inputs read from token 0 of each unit, sharing ids and starts with the key at times
    inp = PYTHON_VERSIONS["units_to_segments"](key_units[: data.draw(st.integers(0, len(key_units)))] + input_units)
    i = data.draw(st.integers(0, len(inp)))
    s = 0
    if i < len(inp) and data.draw(st.booleans()):
        s = data.draw(st.integers(0, inp[i][2] - 1))
    assert core.common_prefix(key, inp, i, s) == PYTHON_VERSIONS["common_prefix"](key, inp, i, s)
    left = sum(e - b for _, b, e in inp[i:]) - s
    t = data.draw(st.integers(0, max(left, 0)))
    if i < len(inp):
        assert core.advance(inp, i, s, t) == PYTHON_VERSIONS["advance"](inp, i, s, t)
