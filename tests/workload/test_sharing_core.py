"""The compiled ``first_unlisted`` returns what the Python version returns, and the shared ids
carry a byte map exactly when they are dense.

``workload/_sharing_core.pyx`` reads a :class:`~servesim.workload.sharing.SharedBlockIds`' byte
map for int ids inside it and asks the set for any other id (negative, beyond the map or 64 bits,
bools, other types) or for a set without a map.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.compiled import compiled_module
from servesim.workload.request import OUTPUT_ID_BASE, Request
from servesim.workload.sharing import (SharedBlockIds, python_dense_shared_map, python_first_unlisted,
                                       shared_block_ids)
from servesim.workload.source import WorkloadSource

core = compiled_module("workload._sharing_core")

ids_ = st.one_of(st.integers(-3, 40), st.integers(2**63 - 2, 2**64), st.integers(OUTPUT_ID_BASE - 2, OUTPUT_ID_BASE),
                 st.booleans())


def _source(lists: list[tuple]) -> WorkloadSource:
    reqs = [Request(index=i, request_id=str(i), arrival=0.0, input_length=max(len(ids), 1), output_length=1,
                    hash_ids=ids, block_size=1) for i, ids in enumerate(lists)]
    return WorkloadSource(mode="open", concurrency=None, description="test", _factory=lambda: iter(reqs))


@pytest.mark.skipif(core is None, reason="compiled core not built")
@settings(max_examples=400, deadline=None)
@given(listed=st.lists(st.lists(st.integers(0, 30), max_size=8).map(tuple), max_size=6),
       extra=st.sets(ids_, max_size=4), ids=st.lists(ids_, max_size=10), as_list=st.booleans())
def test_compiled_first_unlisted_equal_python(listed, extra, ids, as_list):
    shared = shared_block_ids(_source(listed))
    sets = [shared, frozenset(shared) | extra]
    outside = {x for x in extra if not (type(x) is int and 0 <= x < len(shared.dense))}
    sets.append(SharedBlockIds(set(shared) | outside, shared.dense))  # ids beyond the map: in the set alone
    seq = list(ids) if as_list else tuple(ids)
    for s in sets:
        assert core.first_unlisted(seq, s) == python_first_unlisted(seq, s)


@settings(max_examples=200, deadline=None)
@given(listed=st.lists(st.lists(st.integers(0, 30), max_size=8).map(tuple), max_size=6))
def test_the_byte_map_is_the_set_on_its_range(listed):
    shared = shared_block_ids(_source(listed))
    n = sum(map(len, listed))
    assert bool(shared.dense) == bool(n and max(max(t) for t in listed if t) < n)  # no id beyond the listings
    if shared.dense:
        assert set(shared) == {i for i, bit in enumerate(shared.dense) if bit}


def test_sparse_or_negative_ids_have_no_byte_map():
    assert shared_block_ids(_source([(1, 10**6), (10**6,)])).dense == b""
    assert shared_block_ids(_source([(-1, 0), (-1,)])) == {-1}


odd_ids = st.one_of(st.integers(-2, 12), st.booleans(), st.just(2**64), st.floats(0, 3))


@settings(max_examples=400, deadline=None)
@given(listed=st.lists(st.lists(odd_ids, max_size=8), max_size=6), size=st.integers(0, 12), as_tuple=st.booleans())
def test_compiled_dense_shared_map_equal_python(listed, size, as_tuple):
    seqs = [tuple(s) if as_tuple else s for s in listed]
    want = python_dense_shared_map(seqs, size)
    if core is not None:
        assert core.dense_shared_map(seqs, size) == want
    if want is not None:  # the ids listed twice or more, exactly
        counts = Counter(x for s in listed for x in s)
        assert want == bytes(int(counts[i] > 1) for i in range(size))


def test_a_dense_source_is_counted_without_listing_its_ids():
    """A source that says its ids are dense gives the same shared ids, byte map included, as
    one read request by request; one whose ids fall outside its range is read the old way."""
    lists = [(0, 1, 2, 3), (0, 1, 4), (5,), (5, 5)]
    plain = shared_block_ids(_source(lists))
    dense = shared_block_ids(replace(_source(lists), _dense_ids=lambda: (iter(lists), 6)))
    assert dense == plain == {0, 1, 5} and dense.dense == plain.dense == bytes([1, 1, 0, 0, 0, 1])
    short = shared_block_ids(replace(_source(lists), _dense_ids=lambda: (iter(lists), 3)))  # id 5 outside: fallback
    assert short == plain and short.dense == plain.dense
