"""Block-id lists of agentic traces: the check of a row's ``hash_ids``, their conversion to an
array, and the dense ids of a prompt as shared int objects.

An AgentX-scale trace lists millions of block ids (each request's whole context, again and
again).  Reading one spent about half its time in three steps that are one C loop each here:
checking that every id is an integer in [0, 2**64) (a set of the element types, then min and
max), converting the list to a uint64 array (numpy's element-type discovery), and turning a
prompt's dense positions into the shared int objects (``tolist``, ``itemgetter``, then a list
and a tuple).  :func:`parse_id_list` reads a row's ``hash_ids`` straight from the line's text
into an array, so that the JSON decoder never makes an int object per id
(``rows.py``).  These are the Python versions, the reference of
``workload/agentic/_trace_ids_core.pyx`` (``tests/workload/test_trace_ids_core.py`` compares
them), bound in their place when it is built.
"""

from __future__ import annotations

import re
from operator import itemgetter
from typing import Sequence

import numpy as np

from servesim.compiled import compiled_module

_INT_ONLY = {int}
_ID_LIMIT = 1 << 64


def ids_valid(v: list) -> bool:
    """Whether every element is an ``int`` (not a bool, not a float) in [0, 2**64)."""
    return not v or (set(map(type, v)) == _INT_ONLY and min(v) >= 0 and max(v) < _ID_LIMIT)


def id_array(ids: Sequence[int]) -> np.ndarray:
    """The ids (each in [0, 2**64)) as a uint64 array (a trace row's list, or a prompt's tuple)."""
    return np.asarray(ids, dtype=np.uint64)


def shared_ids(ints: list, pos: np.ndarray) -> tuple:
    """``tuple(ints[p] for p in pos)``: the int objects of ``ints`` (each id one object, however
    many prompts list it) at positions ``pos`` (an int64 array of valid indices)."""
    if pos.size == 0:
        return ()
    if pos.size == 1:
        return (ints[int(pos[0])],)
    return itemgetter(*pos.tolist())(ints)


#: A JSON array of integers written plainly: digits with no sign, fraction, exponent or leading
#: zero, and JSON's four whitespace characters around them.
_PLAIN_IDS = re.compile(rb"\[[ \t\n\r]*(?:(?:0|[1-9][0-9]*)[ \t\n\r]*(?:,[ \t\n\r]*(?:0|[1-9][0-9]*)[ \t\n\r]*)*)?\]")


def parse_id_list(text: bytes) -> np.ndarray | None:
    """The ids of ``text``, a JSON array of plainly written integers in [0, 2**64), as a uint64
    array; None for any other text (the caller then decodes it as JSON, and words any error)."""
    if _PLAIN_IDS.fullmatch(text) is None:
        return None
    ids = [int(x) for x in re.findall(rb"[0-9]+", text)]
    if any(x >= _ID_LIMIT for x in ids):
        return None
    return np.array(ids, dtype=np.uint64)


#: The Python versions, the reference of the compiled ones.
PYTHON_VERSIONS = {f.__name__: f for f in (ids_valid, id_array, shared_ids, parse_id_list)}

_core = compiled_module("workload.agentic._trace_ids_core")  # bound at import: servesim/compiled.py's rule
if _core is not None:
    ids_valid = _core.ids_valid  # noqa: F811
    id_array = _core.id_array  # noqa: F811
    shared_ids = _core.shared_ids  # noqa: F811
    parse_id_list = _core.parse_id_list  # noqa: F811
