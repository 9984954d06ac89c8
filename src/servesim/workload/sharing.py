"""Which block ids of a workload more than one request lists.

A prefix-cache hit needs two requests whose sequences share a leading run of blocks, so
a block id that only one request lists (and, since block hashes chain, every block after it
in that request's sequence) can be hit only by that request itself.  The vLLM model uses
this to leave such blocks out of its prefix-cache map (``engines/vllm.py``, "private
blocks"): most of a long prompt's blocks, and every generated block, are never looked up
by another request, and indexing them was the largest part of the block pool's work.

Finding the shared ids costs one pass over the workload before the run (a trace's lines are
decoded for their ``hash_ids`` alone, ``WorkloadSource.listed_block_ids``; other workloads
are generated once more); ids are counted in an array (8 bytes each), not a Python set.  An
agentic graph's ids are dense (``0 .. n - 1``, ``WorkloadSource.dense_listed_ids``): they are
counted in a byte per id as the nodes' tuples are read (:func:`dense_shared_map`), with no
array of every listed id (an AgentX-scale graph lists tens of millions).

The vLLM model asks, for every request it receives, which of its ids is the first one no
other request lists (:func:`first_unlisted`).  An AgentX-scale trace lists its contexts again
and again (millions of ids), and a set lookup per id was most of that question's cost; when
the ids are dense (an agentic graph's interned ids: ``0 .. n - 1``), :class:`SharedBlockIds`
carries them as a byte map too, which ``workload/_sharing_core.pyx`` reads in C.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
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
    dense = source.dense_listed_ids()
    if dense is not None:
        many = dense_shared_map(*dense)
        if many is not None:
            return SharedBlockIds(np.flatnonzero(np.frombuffer(many, dtype=np.uint8)).tolist(), many)
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
        # Dense ids (a trace listing 0 .. n - 1): counted by value, no sort; the count array is
        # no larger than the ids' own.  (None lies in the generated range.)
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
    for chunk in source.listed_block_ids():
        ids.extend(chunk)
    return np.frombuffer(ids, dtype=np.int64)


def dense_shared_map(seqs: Iterable[Sequence[int]], size: int) -> bytes | None:
    """A byte per id ``0 .. size - 1``: 1 where ``seqs`` list it more than once in all; None if
    they list anything else (the reference of ``workload/_sharing_core.pyx``, which counts as
    it reads, without an array of every listed id)."""
    if size < 0:
        raise ValueError(f"need size >= 0, got {size}")
    counts = np.zeros(size, dtype=np.int64)
    for seq in seqs:
        for bid in seq:
            if type(bid) is not int or not 0 <= bid < size:
                return None
            counts[bid] += 1
    return (counts > 1).astype(np.uint8).tobytes()


def first_unlisted(ids: Sequence[int], shared: AbstractSet[int]) -> int:
    """The position of the first of ``ids`` not in ``shared`` (``len(ids)`` if none): the
    reference of ``workload/_sharing_core.pyx``, which reads a :class:`SharedBlockIds`' byte map."""
    for k, bid in enumerate(ids):
        if bid not in shared:
            return k
    return len(ids)


#: The Python versions, the reference of the compiled ones.
python_first_unlisted = first_unlisted
python_dense_shared_map = dense_shared_map

_core = compiled_module("workload._sharing_core")  # bound at import: servesim/compiled.py's rule
if _core is not None:
    first_unlisted = _core.first_unlisted  # noqa: F811
    dense_shared_map = _core.dense_shared_map  # noqa: F811
