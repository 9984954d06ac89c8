"""Block-id lists of agentic traces: the check of a row's ``hash_ids``, their conversion to an
array, and the dense ids of a prompt as shared int objects.

An AgentX-scale trace lists millions of block ids (each request's whole context, again and
again).  Reading one spent about half its time in three steps that are one C loop each here:
checking that every id is an integer in [0, 2**64) (a set of the element types, then min and
max), converting the list to a uint64 array (numpy's element-type discovery), and turning a
prompt's dense positions into the shared int objects (``tolist``, ``itemgetter``, then a list
and a tuple).  :func:`parse_id_list` reads a row's ``hash_ids`` straight from the line's text
into an array, and :func:`cut_id_list` finds that text on the line and cuts it out, so that the
JSON decoder never makes an int object per id, nor reads the list at all (``rows.py``);
:func:`rank_ids` numbers a scope's distinct ids for the graph's interner.  These are the
Python versions, the reference of
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


def rank_ids(flat: np.ndarray, table: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct ids of ``flat`` (uint64) and each element's position among them
    (int64).

    With a ``table`` (int64, indexed by id, larger than every id; its contents on entry do not
    matter): each id's entry is set to a position of the id in ``flat``, and the elements
    found at their own position are one per distinct id; those few are sorted, their ranks
    written to the table and read back for every element.  Linear passes, where a sort of
    ``flat`` (``np.unique``) and a binary search per element are not."""
    if table is None:
        uniq = np.unique(flat)
        return uniq, uniq.searchsorted(flat).astype(np.int64)
    at = np.arange(flat.size, dtype=np.int64)
    table[flat] = at  # repeated ids: one of their positions stays
    uniq = np.sort(flat[table[flat] == at])
    table[uniq] = np.arange(uniq.size, dtype=np.int64)
    return uniq, table[flat]


_parse_id_list = parse_id_list  # the Python version, whichever is bound below
_KEY = '"hash_ids"'
#: The key, then JSON whitespace, a colon and whitespace before the list's ``[``.
_KEY_THEN_LIST = re.compile(r'"hash_ids"[ \t\n\r]*:[ \t\n\r]*(?=\[)')


def cut_id_list(line: str, min_chars: int) -> tuple[str, np.ndarray] | None:
    """``line`` with the value of its one ``"hash_ids"`` key cut out and ``0`` put in its place,
    and the ids of that value (:func:`parse_id_list`); None where the key is missing or written
    twice, its value is not such a list, the list's text is shorter than ``min_chars``, or the
    line holds a ``\\u`` escape.

    The caller decodes the rest as JSON: where ``hash_ids`` comes back as the placeholder, the
    cut was that key's value.  Without ``\\u`` escapes a key named ``hash_ids`` is written as
    those very characters, and they are on the line once; a quote can stand in no string
    unescaped, so that once is the key.  One search each for the key, its second writing, an
    escape and the list's end, and no JSON decoding of the ids (one int object each)."""
    at = line.find(_KEY)
    if at < 0 or line.find(_KEY, at + len(_KEY)) >= 0 or "\\u" in line:
        return None
    m = _KEY_THEN_LIST.match(line, at)
    if m is None:
        return None
    at = m.end()
    end = line.find("]", at)
    if end < 0 or end + 1 - at < min_chars:
        return None
    try:
        text = line[at:end + 1].encode("latin-1")
    except UnicodeEncodeError:
        return None
    ids = _parse_id_list(text)
    if ids is None:
        return None
    return line[:at] + "0" + line[end + 1:], ids


#: The Python versions, the reference of the compiled ones.
PYTHON_VERSIONS = {f.__name__: f for f in (ids_valid, id_array, shared_ids, parse_id_list, cut_id_list, rank_ids)}

_core = compiled_module("workload.agentic._trace_ids_core")  # bound at import: servesim/compiled.py's rule
if _core is not None:
    ids_valid = _core.ids_valid  # noqa: F811
    id_array = _core.id_array  # noqa: F811
    shared_ids = _core.shared_ids  # noqa: F811
    parse_id_list = _core.parse_id_list  # noqa: F811
    cut_id_list = _core.cut_id_list  # noqa: F811
    rank_ids = _core.rank_ids  # noqa: F811
