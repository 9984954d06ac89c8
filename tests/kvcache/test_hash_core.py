"""The compiled ``id_chain``, ``extend_chain`` and ``extend_chain_slice`` (kvcache/_hash_core.pyx) give the Python versions' chains exactly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.compiled import compiled_module
from servesim.kvcache.hashing import (ROOT_HASH, chain_list, python_extend_chain, python_extend_chain_slice,
                                      python_id_chain)

core = compiled_module("kvcache._hash_core")
pytestmark = pytest.mark.skipif(core is None, reason="compiled core not built")

#: Ints around the edges of the C path: the hash modulus (2**61 - 1), int64's range, beyond it.
_EDGES = [0, 1, -1, -2, 2, 2**61 - 2, 2**61 - 1, 2**61, 2**62, 2**63 - 1, -(2**63), -(2**61), 2**64 + 5, -(2**70),
          2 * (2**61 - 1) - 1, 2 * (2**61 - 1), 2 * (2**61 - 1) + 1, 3 * (2**61 - 1), 4 * (2**61 - 1),
          -(2 * (2**61 - 1)), -(4 * (2**61 - 1)) - 1, -(2**63) + 1]
_INTS = st.one_of(st.integers(0, 2**40), st.integers(-(2**63), 2**63 - 1), st.sampled_from(_EDGES),
                  st.integers(-(2**80), 2**80))


def test_hash_matches_this_interpreter():
    assert core._agrees()


@settings(max_examples=500, deadline=None)
@given(ids=st.lists(_INTS, max_size=40), parent=st.one_of(st.just(ROOT_HASH), _INTS))
def test_compiled_id_chain_equals_python(ids, parent):
    assert core.id_chain(ids, parent) == python_id_chain(ids, parent)
    assert core.id_chain(ids) == python_id_chain(ids)


def test_int_hashes_at_multiples_of_the_modulus():
    """The modulo 2**61 - 1 is taken by folding the high bits (no division): exact at and
    around every multiple of the modulus int64 holds, either sign."""
    m = 2**61 - 1
    for k in range(5):
        for d in (-2, -1, 0, 1, 2):
            for x in (k * m + d, -(k * m + d)):
                if -(2**63) <= x < 2**63:
                    assert core.id_chain([x], x) == [hash((x, x))]


def test_non_int_ids_hash_as_python():
    np = pytest.importorskip("numpy")
    ids = [np.int64(5), True, 7, np.int64(-3)]
    assert core.id_chain(ids) == python_id_chain(ids)


@settings(max_examples=300, deadline=None)
@given(start=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5), ids=st.lists(_INTS, max_size=30),
       steps=st.integers(1, 3))
def test_compiled_extend_chain_equals_python(start, ids, steps):
    """Extending a chain list (in C) or a list, from empty or not, in one call or several."""
    want = list(start)
    for k in range(steps):
        python_extend_chain(want, ids[k::steps])
    for make in (list, chain_list):
        chain = make(start)
        for k in range(steps):
            assert core.extend_chain(chain, ids[k::steps]) is chain
        assert type(chain) is type(make()) and list(chain) == want
    assert want[len(start):len(start) + 1] == python_id_chain(ids[:1], start[-1] if start else ROOT_HASH)[:1]


def test_extend_chain_takes_any_sequence_of_ids():
    np = pytest.importorskip("numpy")
    ids = [np.int64(5), True, 7, np.int64(-3)]
    chain = chain_list()
    core.extend_chain(chain, tuple(ids))
    assert list(chain) == python_id_chain(ids)


@settings(max_examples=300, deadline=None)
@given(start=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5), ids=st.lists(_INTS, max_size=30),
       cuts=st.lists(st.integers(-35, 35), min_size=1, max_size=4), as_tuple=st.booleans())
def test_compiled_extend_chain_slice_equals_python(start, ids, cuts, as_tuple):
    """Extending by slices of a tuple (read in place) or a list (sliced), in bounds or not,
    negative bounds included (Python's slice rules), from a chain list or a list."""
    seq = tuple(ids) if as_tuple else list(ids)
    bounds = list(zip([0] + cuts, cuts + [len(ids)]))
    want = list(start)
    for a, b in bounds:
        python_extend_chain_slice(want, seq, a, b)
    assert want == list(start) + python_id_chain(
        [x for a, b in bounds for x in seq[a:b]], start[-1] if start else ROOT_HASH)
    for make in (list, chain_list):
        chain = make(start)
        for a, b in bounds:
            assert core.extend_chain_slice(chain, seq, a, b) is chain
        assert type(chain) is type(make()) and list(chain) == want


def test_extend_chain_slice_hashes_non_int_ids_as_python():
    np = pytest.importorskip("numpy")
    ids = (np.int64(5), True, 7, np.int64(-3), 2**70)
    chain = chain_list([11])
    core.extend_chain_slice(chain, ids, 1, 5)
    assert list(chain) == [11] + python_id_chain(ids[1:5], 11)
