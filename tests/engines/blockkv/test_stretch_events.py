"""Decode-stretch helpers of the block-pool engines: event order and block-hash extension."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.engines.blockkv.arithmetic import stretch_block_events
from servesim.engines.blockkv.manager import extend_block_hashes
from servesim.kvcache.hashing import block_hashes
from servesim.workload.request import sequence_units
from simharness import make_request


def events_pass_by_pass(computed: list[int], k: int, bs: int, caching: bool) -> list[tuple[int, int]]:
    """Reference: walk every pass s = 1..k-1 and every request, as step mode meets them."""
    out = []
    for s in range(1, k):
        for j, c in enumerate(computed):
            opens = (c + s) % bs == 0  # position c + s starts a new block
            fills = caching and (c + s + 1) % bs == 0  # position c + s completes one
            if opens or fills:
                out.append((s, j))
    return out


def test_stretch_block_events_hand_example():
    # bs 4, computed 3 and 6, 6 passes.  Request 0 opens blocks at s = 1, 5 (positions 4, 8)
    # and fills them at s = 4 (position 7); request 1 opens at s = 2 (position 8), fills at s = 1, 5.
    keys = stretch_block_events([3, 6], 6, 4, caching=True)
    assert [divmod(x, 2) for x in keys] == [(1, 0), (1, 1), (2, 1), (4, 0), (5, 0), (5, 1)]
    keys = stretch_block_events([3, 6], 6, 4, caching=False)
    assert [divmod(x, 2) for x in keys] == [(1, 0), (2, 1), (5, 0)]


@settings(max_examples=300, deadline=None)
@given(computed=st.lists(st.integers(0, 200), min_size=1, max_size=8), k=st.integers(1, 80),
       bs=st.sampled_from([1, 2, 3, 8, 16, 32]), caching=st.booleans())
def test_stretch_block_events_match_pass_by_pass(computed, k, bs, caching):
    n = len(computed)
    got = [divmod(x, n) for x in stretch_block_events(computed, k, bs, caching)]
    assert got == events_pass_by_pass(computed, k, bs, caching)


@settings(max_examples=200, deadline=None)
@given(inp=st.integers(1, 3000), steps=st.lists(st.integers(1, 120), min_size=1, max_size=6),
       bs=st.sampled_from([1, 16, 32, 64]), unit=st.sampled_from([16, 64, 512]))
def test_extended_block_hashes_equal_hashes_from_scratch(inp, steps, bs, unit):
    """Extending ahead (to the end of a trace unit) never changes a hash and covers what was asked."""
    req = make_request(0, 0.0, inp, 5000, block_size=unit)
    hashes: list[int] = []
    chain: list[int] = []
    n = 0
    for step in steps:
        n += step
        extend_block_hashes(req, hashes, chain, n, bs)
        assert len(hashes) >= n
        fresh = block_hashes(sequence_units(req, len(hashes) * bs), bs, unit_size=unit)
        assert hashes == fresh
