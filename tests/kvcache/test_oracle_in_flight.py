"""The belady oracle counts blocks of requests already in the system as needed now."""

from __future__ import annotations

import math

from servesim.kvcache.policies import NextUseOracle
from servesim.workload.request import Request, output_block_id


def req(i: int, arrival: float, ids: tuple[int, ...]) -> Request:
    return Request(index=i, request_id=f"r{i}", arrival=arrival, input_length=512 * len(ids),
                   output_length=10, hash_ids=ids)


def test_queued_request_blocks_are_needed_now_until_it_ends():
    a = req(0, 1.0, (1, 2))
    b = req(1, 5.0, (1, 3))
    oracle = NextUseOracle([a, b])
    # Before anything arrives: the next use of block 2 is a's arrival; after it, never.
    assert oracle.next_use(2, 0.0) == 1.0
    assert oracle.next_use(2, 2.0) == math.inf
    # a arrived and waits (or was preempted): its blocks, and its generated ones, are needed now.
    oracle.activate(a)
    assert oracle.next_use(2, 2.0) == 2.0
    assert oracle.next_use(output_block_id(0, 3), 2.0) == 2.0
    assert oracle.next_use(output_block_id(1, 0), 2.0) == math.inf
    oracle.deactivate(a)
    assert oracle.next_use(2, 2.0) == math.inf
    assert oracle.next_use(1, 2.0) == 5.0  # b still comes
