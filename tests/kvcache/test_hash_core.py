"""The compiled ``id_chain`` (kvcache/_hash_core.pyx) returns the Python version's chain exactly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.compiled import compiled_module
from servesim.kvcache.hashing import ROOT_HASH, python_id_chain

core = compiled_module("kvcache._hash_core")
pytestmark = pytest.mark.skipif(core is None, reason="compiled core not built")

#: Ints around the edges of the C path: the hash modulus (2**61 - 1), int64's range, beyond it.
_EDGES = [0, 1, -1, -2, 2, 2**61 - 2, 2**61 - 1, 2**61, 2**62, 2**63 - 1, -(2**63), -(2**61), 2**64 + 5, -(2**70)]
_INTS = st.one_of(st.integers(0, 2**40), st.integers(-(2**63), 2**63 - 1), st.sampled_from(_EDGES),
                  st.integers(-(2**80), 2**80))


def test_hash_matches_this_interpreter():
    assert core._agrees()


@settings(max_examples=500, deadline=None)
@given(ids=st.lists(_INTS, max_size=40), parent=st.one_of(st.just(ROOT_HASH), _INTS))
def test_compiled_id_chain_equals_python(ids, parent):
    assert core.id_chain(ids, parent) == python_id_chain(ids, parent)
    assert core.id_chain(ids) == python_id_chain(ids)


def test_non_int_ids_hash_as_python():
    np = pytest.importorskip("numpy")
    ids = [np.int64(5), True, 7, np.int64(-3)]
    assert core.id_chain(ids) == python_id_chain(ids)
