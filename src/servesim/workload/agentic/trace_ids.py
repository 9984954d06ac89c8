"""Block-id lists of agentic traces: the check of a row's ``hash_ids``, their conversion to an
array, and the dense ids of a prompt as shared int objects.

An AgentX-scale trace lists millions of block ids (each request's whole context, again and
again).  Reading one spent about half its time in three steps that are one C loop each here:
checking that every id is an integer in [0, 2**64) (a set of the element types, then min and
max), converting the list to a uint64 array (numpy's element-type discovery), and turning a
prompt's dense positions into the shared int objects (``tolist``, ``itemgetter``, then a list
and a tuple).  These are the Python versions, the reference of
``workload/agentic/_trace_ids_core.pyx`` (``tests/workload/test_trace_ids_core.py`` compares
them), bound in their place when it is built.
"""

from __future__ import annotations

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


#: The Python versions, the reference of the compiled ones.
PYTHON_VERSIONS = {f.__name__: f for f in (ids_valid, id_array, shared_ids)}

_core = compiled_module("workload.agentic._trace_ids_core")  # bound at import: servesim/compiled.py's rule
if _core is not None:
    ids_valid = _core.ids_valid  # noqa: F811
    id_array = _core.id_array  # noqa: F811
    shared_ids = _core.shared_ids  # noqa: F811
