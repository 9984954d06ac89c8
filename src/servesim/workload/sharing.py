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
"""

from __future__ import annotations

from array import array
from collections import Counter
from itertools import chain

import numpy as np

from servesim.workload.request import OUTPUT_ID_BASE
from servesim.workload.source import WorkloadSource


def shared_block_ids(source: WorkloadSource) -> frozenset[int]:
    """Every block id that more than one of ``source``'s requests lists (in ``hash_ids`` or
    ``output_hash_ids``; an id listed twice by one request counts as shared too).

    Ids of generated tokens (``workload/request.py:output_block_id``, at or below
    ``OUTPUT_ID_BASE``) are listed by no request; should the workload list an id in that
    range, ``OUTPUT_ID_BASE`` itself joins the result as a marker, and every listed id in
    the range counts as shared.
    """
    ids = array("q")
    lists = []
    try:
        for chunk in source.listed_block_ids():
            ids.extend(chunk)  # C long longs: 8 bytes an id
    except OverflowError:  # an id beyond 64 bits: count them all as Python ints
        lists = [list(chunk) for chunk in source.listed_block_ids()]
    if lists:
        counts = Counter(chain.from_iterable(lists))
        shared = {bid for bid, n in counts.items() if n > 1 or bid <= OUTPUT_ID_BASE}
        generated_range = any(bid <= OUTPUT_ID_BASE for bid in counts)
    else:
        uniq, counts = np.unique(np.frombuffer(ids, dtype=np.int64), return_counts=True)
        shared = set(uniq[(counts > 1) | (uniq <= OUTPUT_ID_BASE)].tolist())
        generated_range = bool(uniq.size) and int(uniq[0]) <= OUTPUT_ID_BASE  # sorted: the least first
    if generated_range:
        shared.add(OUTPUT_ID_BASE)
    return frozenset(shared)
