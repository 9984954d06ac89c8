"""Fewer young-generation collections while servesim builds or runs something large.

Reading an agentic trace and running a simulation allocate many short-lived containers (a
trace row's dict and lists, a prompt's tuple of block ids, an SGLang lookup's segments):
each burst of 700 sets off a collection of the young generation, and the older generations'
collections then walk every long prompt tuple built so far.  They took about a fifth of an
SGLang run on agent plays, and a quarter of reading an AgentX trace.  A larger first
threshold runs them a hundred times less often; nothing servesim computes depends on when
the collector runs, and the caller's setting comes back after.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

#: The cyclic collector's first-generation threshold inside :func:`fewer_collections`
#: (Python's default is 700).
RUN_GC_THRESHOLD = 100_000


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the collector's first threshold to :data:`RUN_GC_THRESHOLD` for the block (never lower it)."""
    thresholds = gc.get_threshold()
    if thresholds[0] < RUN_GC_THRESHOLD:
        gc.set_threshold(RUN_GC_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
