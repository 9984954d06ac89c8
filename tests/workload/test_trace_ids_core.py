"""The compiled block-id helpers of agentic trace reading return what the Python versions return.

``workload/agentic/_trace_ids_core.pyx`` replaces the three functions of
:mod:`servesim.workload.agentic.trace_ids`; on lists mixing valid ids with bools, floats,
strings, negative and too large integers, each must give the Python version's answer.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.compiled import compiled_module
from servesim.workload.agentic.trace_ids import PYTHON_VERSIONS

core = compiled_module("workload.agentic._trace_ids_core")
pytestmark = pytest.mark.skipif(core is None, reason="compiled core not built")

valid = st.integers(0, 2**64 - 1)
anything = st.one_of(valid, st.booleans(), st.floats(allow_nan=False), st.integers(-(2**70), -1),
                     st.integers(2**64, 2**70), st.text(max_size=2), st.none())


@settings(max_examples=400, deadline=None)
@given(ids=st.lists(valid, max_size=8), bad=st.lists(anything, max_size=2), at=st.integers(0, 8))
def test_ids_valid_equal_python(ids, bad, at):
    for v in (ids, ids[:at] + bad + ids[at:]):
        assert core.ids_valid(v) == PYTHON_VERSIONS["ids_valid"](v)


@settings(max_examples=300, deadline=None)
@given(ids=st.lists(valid, max_size=8), as_tuple=st.booleans())
def test_id_array_equal_python(ids, as_tuple):
    v = tuple(ids) if as_tuple else ids
    got, want = core.id_array(v), PYTHON_VERSIONS["id_array"](v)
    assert got.dtype == want.dtype == np.uint64 and got.tolist() == want.tolist()


@pytest.mark.parametrize("as_tuple", [False, True])
@pytest.mark.parametrize("bad", [-1, 2**64, 1.5, True, "x"])
def test_id_array_leaves_other_lists_to_numpy(bad, as_tuple):
    """A list or tuple that is not all valid ids gets numpy's own answer: its array, or its error."""
    def outcome(f):
        try:
            return f((1, bad) if as_tuple else [1, bad]).tolist()
        except Exception as exc:  # noqa: BLE001 - the error's type is the answer
            return type(exc)

    assert outcome(core.id_array) == outcome(PYTHON_VERSIONS["id_array"])


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 40), pos=st.lists(st.integers(0, 39), max_size=10))
def test_shared_ids_equal_python(n, pos):
    ints = [10**20 + k for k in range(n)]  # large: distinct objects, identity checked
    p = np.array([x % n for x in pos], dtype=np.int64)
    got, want = core.shared_ids(ints, p), PYTHON_VERSIONS["shared_ids"](ints, p)
    assert got == want and all(a is b for a, b in zip(got, want)) and type(got) is tuple


_PIECES = st.sampled_from(["[", "]", ",", " ", "\t", "\n", "0", "1", "9", "-", ".", "e", "x", "18446744073709551616"])


@settings(max_examples=500, deadline=None)
@given(ids=st.lists(valid, max_size=8), spaces=st.lists(st.sampled_from(["", " ", "\t", "\r\n"]), min_size=2,
                                                       max_size=2), noise=st.lists(_PIECES, max_size=6),
       at=st.integers(0, 60))
def test_parse_id_list_equal_python(ids, spaces, noise, at):
    """Plain lists parse to their ids; any text with something else gives None, both ways."""
    text = ("[" + spaces[0] + (spaces[1] + "," + spaces[0]).join(map(str, ids)) + spaces[1] + "]").encode()
    got, want = core.parse_id_list(text), PYTHON_VERSIONS["parse_id_list"](text)
    assert got is not None and want is not None and got.tolist() == want.tolist() == ids
    assert got.dtype == want.dtype == np.uint64
    bent = text[:at] + "".join(noise).encode() + text[at:]
    got, want = core.parse_id_list(bent), PYTHON_VERSIONS["parse_id_list"](bent)
    assert (got is None) == (want is None) and (got is None or got.tolist() == want.tolist())


def test_shared_ids_of_ints_are_not_left_to_the_collector():
    """A prompt's tuple of ints cannot be in a cycle: the collector never needs to walk it.
    Anything else stays tracked, as the Python version's tuple is."""
    import gc

    pos = np.array([0, 1], dtype=np.int64)
    assert not gc.is_tracked(core.shared_ids([10**20, 10**20 + 1], pos))
    assert gc.is_tracked(core.shared_ids([[1], [2]], pos))


_LINE_PIECES = st.sampled_from(['"hash_ids"', ":", " ", "[", "]", ",", "7", "\\u0041", "\\\\", '"x"', "{", "}", "é",
                                "\u4e00"])


@settings(max_examples=500, deadline=None)
@given(ids=st.lists(valid, max_size=8), spaces=st.lists(st.sampled_from(["", " ", "\t"]), min_size=2, max_size=2),
       noise=st.lists(_LINE_PIECES, max_size=5), at=st.integers(0, 200), min_chars=st.integers(0, 40),
       model=st.sampled_from(["m", "é", "\u4e00"]))
def test_cut_id_list_equal_python(ids, spaces, noise, at, min_chars, model):
    """A row's line with its list cut out, both ways; with noise put anywhere, the same answer or None."""
    line = ('{"request_id": "r", "model": "' + model + '", "hash_ids"' + spaces[0] + ":" + spaces[1] + "["
            + ", ".join(map(str, ids)) + '], "output_length": 3}\n')
    for text in (line, line[:at] + "".join(noise) + line[at:]):
        got, want = core.cut_id_list(text, min_chars), PYTHON_VERSIONS["cut_id_list"](text, min_chars)
        assert (got is None) == (want is None)
        if got is not None:
            assert got[0] == want[0] and got[1].dtype == want[1].dtype == np.uint64
            assert got[1].tolist() == want[1].tolist()
    if len("[" + ", ".join(map(str, ids)) + "]") >= min_chars:
        rest, got = core.cut_id_list(line, min_chars)
        assert got.tolist() == ids and rest == line.replace("[" + ", ".join(map(str, ids)) + "]", "0")
