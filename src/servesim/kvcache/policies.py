"""Eviction policies shared by the radix cache and the hashed block pool.

A policy only *orders* evictable entries (radix leaves, or free cached blocks): the entry
with the smallest ``key(entry, now)`` is evicted first.  Entries are the caches' own
node/block objects; they expose the attributes of :class:`EntryStats`, so ranking needs no
per-call record building.  Keeping the interface this small lets both caches share every
policy and lets studies add one without touching the data structures.

``belady`` needs to see the future: a :class:`NextUseOracle` built from the workload's
requests answers "when is block id *b* next used after time *now*".
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from servesim.workload.request import OUTPUT_ID_BASE, Request


class EntryStats(Protocol):
    """What a policy may read from an evictable entry."""

    #: Virtual time of the last access (match, insert, hit, release).
    last_access: float
    #: Logical clock of the last access: strictly increasing, so recency ties never occur.
    last_seq: int
    #: Number of accesses (insert counts as one).
    access_count: int
    #: Virtual time and logical clock at which the entry entered the cache.
    insert_time: float
    insert_seq: int
    #: The trace block id the entry's first token belongs to (what the oracle knows).
    block_id: int


class EvictionPolicy:
    """Orders entries for eviction: smallest ``key`` goes first."""

    name: str = "base"

    def key(self, entry: EntryStats, now: float) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class LRUPolicy(EvictionPolicy):
    """Least recently used first (SGLang's and vLLM's default)."""

    name = "lru"

    def key(self, entry: EntryStats, now: float) -> Any:
        return entry.last_seq


class LFUPolicy(EvictionPolicy):
    """Least frequently used first; ties broken by recency."""

    name = "lfu"

    def key(self, entry: EntryStats, now: float) -> Any:
        return (entry.access_count, entry.last_seq)


class FIFOPolicy(EvictionPolicy):
    """Oldest insertion first, regardless of use."""

    name = "fifo"

    def key(self, entry: EntryStats, now: float) -> Any:
        return entry.insert_seq


class BeladyPolicy(EvictionPolicy):
    """Farthest next use first (Belady's MIN); entries never used again go first.

    An upper bound for studies, not an engine behaviour: it reads the workload's future.
    """

    name = "belady"

    def __init__(self, oracle: NextUseOracle) -> None:
        self.oracle = oracle

    def key(self, entry: EntryStats, now: float) -> Any:
        nxt = self.oracle.next_use(entry.block_id, now)
        # Blocks needed now (a request using them is in flight) go last, by recency.  Their
        # key is +inf rather than -now so that it does not shrink as time passes: the block
        # pool's lazy heap relies on keys that only grow between the events it watches.
        return (math.inf if nxt <= now else -nxt, entry.last_seq)


class NextUseOracle:
    """For each trace block id, the sorted arrival times of the requests whose prompt uses it.

    Built from the workload's requests (``Request`` objects, whose ``hash_ids`` are the
    prompt's blocks) or from ``(arrival_time, units)`` pairs.  Future use is keyed on
    arrival time; requests already in the system are reported by the simulation
    (:meth:`activate` / :meth:`deactivate`), so that the blocks of a queued or preempted
    request count as needed now rather than never again.
    """

    __slots__ = ("_times", "_active", "_active_requests", "_listeners")

    def __init__(self, items: Iterable[Request | tuple[float, Iterable[tuple[int, int]]]]) -> None:
        acc: dict[int, list[float]] = {}
        for item in items:
            if isinstance(item, Request):
                t, ids = item.arrival, item.hash_ids
            else:
                t, units = item
                ids = [u[0] for u in units]
            for bid in set(ids):
                lst = acc.get(bid)
                if lst is None:
                    acc[bid] = [t]
                else:
                    lst.append(t)
        for lst in acc.values():
            lst.sort()
        self._times = acc
        #: Blocks of requests that arrived and have not ended (queued, running, preempted):
        #: they will be used again as soon as the engine gets to them.
        self._active: dict[int, int] = {}
        #: Indices of requests in flight, whose generated-token blocks are needed too.
        self._active_requests: set[int] = set()
        #: Called with a request's block ids when it ends (their next use moves later).
        self._listeners: list[Callable[[set[int]], None]] = []

    def subscribe(self, listener: Callable[[set[int]], None]) -> None:
        """Call ``listener(groups)`` whenever a request ends: the :func:`content_group` of
        every block id whose next use may have moved later (see :meth:`deactivate`)."""
        self._listeners.append(listener)

    def activate(self, req: Request) -> None:
        """A request arrived; until :meth:`deactivate`, its prompt and output blocks are in use now."""
        act = self._active
        for bid in set(req.hash_ids) | set(req.output_hash_ids):
            act[bid] = act.get(bid, 0) + 1
        self._active_requests.add(req.index)

    def deactivate(self, req: Request) -> None:
        """The request ended (completed or rejected)."""
        self._active_requests.discard(req.index)
        act = self._active
        ids = set(req.hash_ids) | set(req.output_hash_ids)
        for bid in ids:
            n = act[bid] - 1
            if n:
                act[bid] = n
            else:
                del act[bid]
        if self._listeners:
            ids.add(output_group(req.index))  # its generated-token blocks
            for listener in self._listeners:
                listener(ids)

    def next_use(self, block_id: int, now: float) -> float:
        """When ``block_id`` is next needed: ``now`` while a request using it is in flight
        (waiting, running or preempted), else the earliest arrival strictly after ``now`` of
        a request using it; ``inf`` if none."""
        if block_id in self._active:
            return now
        if block_id <= OUTPUT_ID_BASE and (OUTPUT_ID_BASE - block_id) >> 24 in self._active_requests:
            return now  # a generated-token block of a request in flight
        times = self._times.get(block_id)
        if times is None:
            return math.inf
        i = bisect_right(times, now)
        return times[i] if i < len(times) else math.inf


def output_group(request_index: int) -> int:
    """One id standing for every generated-token block id of a request (see :func:`content_group`)."""
    return OUTPUT_ID_BASE - (request_index << 24)


def content_group(block_id: int) -> int:
    """``block_id`` itself, or for a generated-token block its request's :func:`output_group`:
    the unit in which the oracle's answers change when a request ends."""
    if block_id <= OUTPUT_ID_BASE:
        return output_group((OUTPUT_ID_BASE - block_id) >> 24)
    return block_id


POLICY_NAMES: tuple[str, ...] = ("lru", "lfu", "fifo", "belady")


def make_policy(name: str = "lru", oracle: NextUseOracle | None = None) -> EvictionPolicy:
    """The policy called ``name``; ``belady`` requires an ``oracle``."""
    if name == "lru":
        return LRUPolicy()
    if name == "lfu":
        return LFUPolicy()
    if name == "fifo":
        return FIFOPolicy()
    if name == "belady":
        if oracle is None:
            raise ValueError("eviction policy 'belady' needs a NextUseOracle built from the workload")
        return BeladyPolicy(oracle)
    raise ValueError(f"unknown eviction policy {name!r}; expected one of {', '.join(POLICY_NAMES)}")
