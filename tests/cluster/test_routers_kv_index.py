"""The router's KV index: built from delayed KV events only."""

from __future__ import annotations

import random

from servesim.cluster.kv_index import KVIndex
from servesim.kvcache.events import KVEvent
from servesim.kvcache.radix_cache import RadixCache
from servesim.workload.request import Request, sequence_units

BS = 512


def req(hash_ids, input_length=None, i=0) -> Request:
    n = input_length if input_length is not None else len(hash_ids) * BS
    return Request(index=i, request_id=str(i), arrival=0.0, input_length=n, output_length=1,
                   hash_ids=tuple(hash_ids), block_size=BS)


def stored(*segments, kind="stored", time=None):
    return KVEvent(kind, tuple(dict.fromkeys(s[0] for s in segments)), sum(e - s for _, s, e in segments),
                   time=time, segments=tuple(segments))


def test_event_invisible_before_delay_and_visible_after():
    clock = [10.0]
    idx = KVIndex(delay=0.5)
    sink = idx.sink(0, clock=lambda: clock[0])
    sink(stored((1, 0, BS), (2, 0, BS)))
    r = req([1, 2, 3])
    idx.advance(10.0)
    assert idx.overlap(r, 0) == 0
    idx.advance(10.499)
    assert idx.overlap(r, 0) == 0 and idx.pending == 1
    idx.advance(10.5)
    assert idx.overlap(r, 0) == 2 and idx.pending == 0
    assert idx.overlap(r, 1) == 0  # another worker holds nothing


def test_removal_is_delayed_too():
    idx = KVIndex(delay=1.0)
    sink = idx.sink(3)
    sink(stored((1, 0, BS), (2, 0, BS), time=0.0))
    sink(stored((2, 0, BS), kind="removed", time=2.0))
    r = req([1, 2])
    idx.advance(1.0)
    assert idx.overlap(r, 3) == 2
    idx.advance(2.9)
    assert idx.overlap(r, 3) == 2  # the removal is not seen yet
    idx.advance(3.0)
    assert idx.overlap(r, 3) == 1
    assert idx.anomalies == 0


def test_stamped_time_wins_over_clock_and_zero_delay_is_immediate():
    idx = KVIndex(delay=0.0, clock=lambda: 100.0)
    idx.sink(0)(stored((5, 0, BS)).stamped(1.0, 0))
    idx.advance(1.0)
    assert idx.overlap(req([5]), 0) == 1


def test_prefix_walk_stops_at_first_miss():
    idx = KVIndex()
    idx.sink(0)(stored((1, 0, BS), (3, 0, BS), time=0.0))
    idx.advance(0.0)
    assert idx.overlap(req([1, 2, 3]), 0) == 1


def test_partial_blocks_need_the_tokens_the_request_uses():
    idx = KVIndex()
    sink = idx.sink(0)
    # A node ending 100 tokens into block 2, then a child continuing block 2 to 300.
    sink(stored((1, 0, BS), (2, 0, 100), time=0.0))
    idx.advance(0.0)
    assert idx.held_tokens(0, 2) == 100
    assert idx.overlap(req([1, 2], input_length=BS + 100), 0) == 2  # needs 100 of block 2
    assert idx.overlap(req([1, 2], input_length=BS + 101), 0) == 1
    sink(stored((2, 100, 300), time=0.0))
    idx.advance(0.0)
    assert idx.overlap(req([1, 2], input_length=BS + 300), 0) == 2
    assert idx.overlap(req([1, 2]), 0) == 1  # the full block is not held
    sink(stored((2, 100, 300), kind="removed", time=0.0))
    idx.advance(0.0)
    assert idx.held_tokens(0, 2) == 100


def test_host_tier_events_ignored_by_default():
    idx = KVIndex()
    idx.sink(0)(KVEvent("stored", (1,), BS, tier="host", time=0.0, segments=((1, 0, BS),)))
    idx.advance(0.0)
    assert idx.overlap(req([1]), 0) == 0 and idx.applied == 0


def test_hashed_block_events():
    from servesim.kvcache.hashing import block_hashes

    r = req([7, 8, 9], input_length=3 * BS - 40)
    hashes = block_hashes(sequence_units(r, r.input_length), 16, r.input_length, unit_size=BS)
    idx = KVIndex(hash_block_size=16)
    sink = idx.sink(1)
    sink(KVEvent("stored", tuple(hashes[:40]), 40 * 16, time=0.0))  # 640 tokens: 1 full trace block
    idx.advance(0.0)
    assert idx.overlap(r, 1) == 1
    sink(KVEvent("stored", tuple(hashes[40:]), 0, time=0.0))  # every full pool block of the prompt
    idx.advance(0.0)
    assert idx.overlap(r, 1) == 2  # the last trace block's 8-token tail is never a full pool block
    sink(KVEvent("removed", tuple(hashes[:1]), 16, time=0.0))
    idx.advance(0.0)
    assert idx.overlap(r, 1) == 0


def _expected_blocks(r: Request, matched_tokens: int) -> int:
    n, left = 0, r.input_length
    for k in range(len(r.hash_ids)):
        need = min(BS, left)
        if need <= 0 or matched_tokens < k * BS + need:
            break
        n += 1
        left -= BS
    return n


def test_index_agrees_with_a_real_radix_cache():
    """Random inserts, splits (by matching) and evictions: the index built from the cache's
    events gives the same block overlap as the cache's own prefix match."""
    rng = random.Random(0)
    cache = RadixCache(60 * BS)
    idx = KVIndex()
    cache.on_event = idx.sink(0)
    # Prompts drawn from a small tree of block-id prefixes, with partial last blocks.
    reqs = []
    for i in range(300):
        depth = rng.randint(1, 6)
        ids = [rng.randint(0, 1)]
        for d in range(1, depth):
            ids.append(ids[-1] * 4 + rng.randint(0, 3) + 10 ** d)
        length = (depth - 1) * BS + rng.choice([BS, rng.randint(1, BS)])
        reqs.append(req(ids, length, i))
    hits = partial_hits = 0
    for t, r in enumerate(reqs):
        cache.now = float(t)
        units = sequence_units(r, r.input_length)
        m = cache.match_prefix(units, r.input_length)
        idx.advance(float(t))
        assert idx.overlap(r, 0) == _expected_blocks(r, m.tokens), t
        hits += idx.overlap(r, 0) > 0
        partial_hits += m.tokens % BS != 0
        cache.inc_lock_ref(m.node)
        need = r.input_length - m.tokens
        if cache.alloc(need):
            cache.cache_finished(units, r.input_length, m.tokens, m.node)
        else:
            cache.dec_lock_ref(m.node)
        if rng.random() < 0.2:
            cache.evict(rng.randint(1, 10 * BS))
    cache.check_invariants()
    idx.advance(float(len(reqs)))
    assert idx.pending == 0 and idx.anomalies == 0
    assert hits > 100 and partial_hits > 10  # the walk was exercised, partial blocks included
    assert sum(sum(c.values()) for c in idx._tokens.values()) == cache.total_size
