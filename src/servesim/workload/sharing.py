"""Which block ids of a workload more than one request lists.

A prefix-cache hit needs two requests whose sequences share a leading run of blocks, so
a block id that only one request lists (and, since block hashes chain, every block after it
in that request's sequence) can be hit only by that request itself.  The vLLM model uses
this to leave such blocks out of its prefix-cache map (``engines/vllm.py``, "private
blocks"): most of a long prompt's blocks, and every generated block, are never looked up
by another request, and indexing them was the largest part of the block pool's work.

Finding the shared ids costs one pass over the workload before the run (a trace's lines are
decoded for their ``hash_ids`` alone, ``WorkloadSource.listed_block_ids``; other workloads
are generated once more); ids are counted in an array (8 bytes each), not a Python set.

The vLLM model asks, for every request it receives, which of its ids is the first one no
other request lists (:func:`first_unlisted`).  An AgentX-scale trace lists its contexts again
and again (millions of ids), and a set lookup per id was most of that question's cost; when
the ids are dense (an agentic graph's interned ids: ``0 .. n - 1``), :class:`SharedBlockIds`
carries them as a byte map too, which ``workload/_sharing_core.pyx`` reads in C.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from itertools import chain

import numpy as np

from servesim.compiled import compiled_module
from servesim.workload.request import OUTPUT_ID_BASE
from servesim.workload.source import WorkloadSource


class SharedBlockIds(frozenset):
    """The shared block ids (a frozenset), with ``dense``: a byte per id ``0 .. len(dense) - 1``,
    1 where the id is shared (empty when the ids are not dense).  An id in that range is shared
    exactly when its byte is 1; any other id is looked up in the set."""

    __slots__ = ("dense",)

    def __new__(cls, ids, dense: bytes = b"") -> SharedBlockIds:
        self = super().__new__(cls, ids)
        self.dense = dense
        return self

    def __reduce__(self):
        return (SharedBlockIds, (frozenset(self), self.dense))


def shared_block_ids(source: WorkloadSource) -> SharedBlockIds:
    """Every block id that more than one of ``source``'s requests lists (in ``hash_ids`` or
    ``output_hash_ids``; an id listed twice by one request counts as shared too).

    Ids of generated tokens (``workload/request.py:output_block_id``, at or below
    ``OUTPUT_ID_BASE``) are listed by no request; should the workload list an id in that
    range, ``OUTPUT_ID_BASE`` itself joins the result as a marker, and every listed id in
    the range counts as shared.
    """
    try:
        listed = _listed_array(source)
    except OverflowError:  # an id beyond 64 bits: count them all as Python ints
        listed = None
    if listed is None:
        counts = Counter(chain.from_iterable(list(chunk) for chunk in source.listed_block_ids()))
        shared = {bid for bid, n in counts.items() if n > 1 or bid <= OUTPUT_ID_BASE}
        if any(bid <= OUTPUT_ID_BASE for bid in counts):
            shared.add(OUTPUT_ID_BASE)
        return SharedBlockIds(shared)
    if listed.size and listed.min() >= 0 and listed.max() < listed.size:
        # Dense ids (an agentic graph's): counted by value, no sort; the count array is no
        # larger than the ids' own.  (None lies in the generated range.)
        many = np.bincount(listed) > 1
        return SharedBlockIds(np.flatnonzero(many).tolist(), many.view(np.uint8).tobytes())
    uniq, counts = np.unique(listed, return_counts=True)
    shared = uniq[(counts > 1) | (uniq <= OUTPUT_ID_BASE)].tolist()
    if uniq.size and int(uniq[0]) <= OUTPUT_ID_BASE:  # sorted: the least first
        shared.append(OUTPUT_ID_BASE)
    return SharedBlockIds(shared)


def _listed_array(source: WorkloadSource) -> np.ndarray:
    """Every id the workload lists, as int64, in no particular order (OverflowError for an id
    beyond 64 bits)."""
    ids = array("q")  # C long longs: 8 bytes an id
    parts = []
    for chunk in source.listed_block_ids():
        if isinstance(chunk, np.ndarray):  # an agentic graph's ids, already int64
            parts.append(chunk.astype(np.int64, copy=False))
        else:
            ids.extend(chunk)
    if ids or not parts:
        parts.append(np.frombuffer(ids, dtype=np.int64))
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def first_unlisted(ids: Sequence[int], shared: AbstractSet[int]) -> int:
    """The position of the first of ``ids`` not in ``shared`` (``len(ids)`` if none): the
    reference of ``workload/_sharing_core.pyx``, which reads a :class:`SharedBlockIds`' byte map."""
    for k, bid in enumerate(ids):
        if bid not in shared:
            return k
    return len(ids)


#: The Python version, the reference of the compiled one.
python_first_unlisted = first_unlisted

_core = compiled_module("workload._sharing_core")  # bound at import: servesim/compiled.py's rule
if _core is not None:
    first_unlisted = _core.first_unlisted  # noqa: F811
