"""The compiled ``sequence_units`` (and ``sequence_block_ids``, ``sequence_segments``) return the
Python versions' results exactly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.compiled import compiled_module
from servesim.workload.request import Request, python_sequence_block_ids, python_sequence_segments, python_sequence_units

core = compiled_module("workload._units_core")
pytestmark = pytest.mark.skipif(core is None, reason="compiled core not built")


@settings(max_examples=400, deadline=None)
@given(index=st.one_of(st.integers(0, 2**20), st.integers(2**38 - 4, 2**40)), block_size=st.sampled_from([1, 16, 64, 512]),
       ids=st.lists(st.integers(0, 2**40), max_size=6), out_ids=st.lists(st.integers(0, 2**40), max_size=3),
       n_tokens=st.integers(-600, 6000), as_list=st.booleans())
def test_compiled_sequence_units_equal_python(index, block_size, ids, out_ids, n_tokens, as_list):
    req = Request(index=index, request_id="r", arrival=0.0, input_length=max(1, len(ids) * block_size),
                  output_length=10, hash_ids=list(ids) if as_list else tuple(ids), block_size=block_size,
                  output_hash_ids=tuple(out_ids))
    assert core.sequence_units(req, n_tokens) == python_sequence_units(req, n_tokens)


@settings(max_examples=400, deadline=None)
@given(index=st.one_of(st.integers(0, 2**20), st.integers(2**38 - 4, 2**40)), block_size=st.sampled_from([1, 16, 64, 512]),
       ids=st.lists(st.integers(0, 2**40), max_size=6), out_ids=st.lists(st.integers(0, 2**40), max_size=3),
       start=st.integers(-100, 6000), length=st.integers(-100, 6000))
def test_compiled_sequence_segments_equal_python(index, block_size, ids, out_ids, start, length):
    req = Request(index=index, request_id="r", arrival=0.0, input_length=max(1, len(ids) * block_size),
                  output_length=10, hash_ids=tuple(ids), block_size=block_size, output_hash_ids=tuple(out_ids))
    assert core.sequence_segments(req, start, start + length) == python_sequence_segments(req, start, start + length)


@settings(max_examples=200, deadline=None)
@given(block_size=st.sampled_from([1, 16, 64]), n_ids=st.integers(0, 6), start=st.integers(0, 500),
       length=st.integers(0, 500))
def test_sequence_segments_are_the_units_from_start(block_size, n_ids, start, length):
    """Segments of [start, stop) name the same tokens, in order, as the units' last ``length`` tokens."""
    req = Request(index=3, request_id="r", arrival=0.0, input_length=max(1, n_ids * block_size),
                  output_length=10, hash_ids=tuple(range(100, 100 + n_ids)), block_size=block_size)
    stop = start + length
    unit_tokens = [(bid, t) for bid, n in python_sequence_units(req, stop) for t in range(n)]
    seg_tokens = [(bid, t) for bid, first, end in python_sequence_segments(req, start, stop) for t in range(first, end)]
    assert seg_tokens == unit_tokens[start:]


@settings(max_examples=400, deadline=None)
@given(index=st.one_of(st.integers(0, 2**20), st.integers(2**38 - 4, 2**40)), block_size=st.sampled_from([1, 16, 512]),
       ids=st.lists(st.integers(0, 2**40), max_size=6), out_ids=st.lists(st.integers(0, 2**40), max_size=3),
       first=st.integers(-3, 12), length=st.integers(-3, 12))
def test_block_ids_are_the_units_ids_from_first(index, block_size, ids, out_ids, first, length):
    """Both versions give the ids of ``sequence_units``' blocks ``first .. stop - 1``."""
    req = Request(index=index, request_id="r", arrival=0.0, input_length=max(1, len(ids) * block_size),
                  output_length=10, hash_ids=tuple(ids), block_size=block_size, output_hash_ids=tuple(out_ids))
    stop = first + length
    want = [bid for bid, _ in python_sequence_units(req, max(stop, 0) * block_size)][max(first, 0):]
    assert python_sequence_block_ids(req, first, stop) == want
    assert core.sequence_block_ids(req, first, stop) == want
