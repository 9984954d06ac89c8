"""The compiled LRU pool equals the Python pool after every operation of random sequences.

Both pools get the same random allocations, prefix registrations (with hashes that repeat,
and some beyond a signed 64-bit integer), prefix hits and frees, with KV event sinks on or
off, on Python lists of block ids and on block lists (``block_list``, read and extended in
place by the compiled core); after each operation the return values, the events, the free order, the hash map, the
reference counts and the counters must agree, and the compiled core's own invariant check
must pass.  Small pools keep its hash map crowded, so probing and deletion by backward shift
are exercised.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.compiled import compiled_module
from servesim.kvcache.block_pool import BlockPool, block_list
from servesim.kvcache.hashing import chain_list
from servesim.kvcache.lru_pool import CompiledLRUPool, compiled_core_available, new_block_pool
from simharness import python_versions

pytestmark = pytest.mark.skipif(not compiled_core_available(), reason="compiled core not built")


def state(pool) -> tuple:
    return (pool.free_order(), sorted(pool.cached_map().items()), list(pool.refs), list(pool.hashes),
            pool.num_free_blocks, pool.num_used_blocks, pool.num_cached_blocks)


def random_hash(rng: random.Random, small: list[int]) -> int:
    """Mostly from a small set (so hashes repeat and collide with cached ones), sometimes huge."""
    r = rng.random()
    if r < 0.05:
        return 2**63 + rng.randint(0, 600)  # beyond int64, as a chained hash plus offset can be
    if r < 0.1:
        return -(2**63) + rng.randint(0, 5)
    return rng.choice(small)


def apply(pool, op: tuple, log: list) -> object:
    """Run one operation; an exception is part of the outcome."""
    kind, arg = op
    try:
        if kind == "allocate":
            return pool.allocate(arg)
        if kind == "allocate_to":  # a request's block list grows in place (each pool its own copy)
            blocks, n = arg
            ids = block_list(blocks)
            return pool.allocate_to(ids, n), ids
        if kind == "free":
            pool.free_request(arg)
            return None
        if kind == "cache":
            blocks, hashes = arg
            return pool.cache_full_blocks(blocks, hashes)
        if kind == "lookup":
            n = pool.find_cached_prefix(arg)
            hits = pool.count_free_hits(arg[:n])
            return n, hits, pool.take_cached(arg[:n]), [pool.get_cached_block(h) for h in arg]
        if kind == "chain_cache":
            blocks, chain, unit, start, stop = arg
            return pool.chain_cache(blocks, chain, unit, start, stop)
        if kind == "chain_lookup":
            chain, unit, n = arg
            m = pool.chain_prefix(chain, unit, n)
            return m, pool.chain_count_free(chain, unit, m), pool.chain_take(chain, unit, m)
        if kind == "chain_take_within":  # the hit, if ``need`` fresh blocks fit beside it
            chain, unit, n, need = arg
            m = pool.chain_prefix(chain, unit, n)
            return m, None, pool.chain_take_within(chain, unit, m, need)
    except (RuntimeError, KeyError) as exc:
        return type(exc).__name__
    raise AssertionError(kind)


def random_chain(rng: random.Random, values: list[int], unit: int, n_blocks: int):
    """A unit chain reaching block ``n_blocks - 1`` (blocks of 4 tokens), from a small set of
    values (so hashes repeat) that includes some within a unit of 2^63 (so a block's hash, the
    value plus its offset, passes int64), and the two lowest int64 values (``_lru_core``'s
    reserved hashes, which a block can still be cached under); a list or a chain list (the
    engines' kind, read in place by the compiled core)."""
    units = (n_blocks * 4 - 1) // unit + 1 if n_blocks else 0
    chain = [rng.choice(values) for _ in range(units)]
    return chain_list(chain) if rng.random() < 0.5 else chain


def run(seed: int, num_blocks: int, sink: bool) -> None:
    rng = random.Random(seed)
    small = [rng.randint(-(2**63), 2**63 - 1) for _ in range(3 * num_blocks + 2)]
    chain_values = [rng.randint(-(2**63), 2**63 - 1) for _ in range(4)] + [2**63 - 1 - rng.randint(0, 12), -(2**63)]
    logs: list[list] = [[], []]
    pools = [BlockPool(num_blocks, 4), CompiledLRUPool(num_blocks, 4)]
    if sink:
        for pool, log in zip(pools, logs):
            pool.on_event = log.append
            pool.on_evict = lambda hs, log=log: log.append(("evict", hs))
    held: list[list[int]] = []  # each "request"'s blocks, in the Python pool's ids (equal in both)
    for _ in range(200):
        r = rng.random()
        if r < 0.25:
            op = ("allocate", rng.randint(0, num_blocks // 2 + 1))
        elif r < 0.35 and held:
            op = ("allocate_to", (rng.choice(held), rng.randint(0, num_blocks // 2 + 1)))
        elif r < 0.55 and held:
            op = ("free", held.pop(rng.randrange(len(held))))
        elif r < 0.8 and held:
            blocks = rng.choice(held)
            op = ("cache", (blocks, [random_hash(rng, small) for _ in blocks]))
        elif r < 0.85:
            op = ("lookup", [random_hash(rng, small) for _ in range(rng.randint(0, 6))])
        elif r < 0.9 and held:  # hashes from a unit chain: units of 3 to 12 tokens (blocks of 4)
            blocks, unit = rng.choice(held), rng.choice([3, 4, 8, 12])
            start = rng.randint(0, len(blocks))
            stop = rng.randint(start, len(blocks))
            op = ("chain_cache", (blocks, random_chain(rng, chain_values, unit, stop), unit, start, stop))
        elif r < 0.93:
            unit, n = rng.choice([3, 4, 8, 12]), rng.randint(0, 6)
            op = ("chain_lookup", (random_chain(rng, chain_values, unit, n), unit, n))
        elif r < 0.95:
            unit, n = rng.choice([3, 4, 8, 12]), rng.randint(0, 6)
            op = ("chain_take_within", (random_chain(rng, chain_values, unit, n), unit, n,
                                        rng.randint(0, num_blocks)))
        elif pools[0].free_order():  # a bad free: a block nobody holds
            op = ("free", [rng.choice(pools[0].free_order())])
        else:
            continue
        out = [apply(pool, op, log) for pool, log in zip(pools, logs)]
        assert out[0] == out[1], (op, out)
        if op[0] == "allocate" and out[0]:
            held.append(out[0])
        elif op[0] == "allocate_to" and out[0][0]:
            held = [out[0][1] if h is op[1][0] else h for h in held]
            assert isinstance(out[1][1], type(block_list()))
        elif op[0] in ("lookup", "chain_lookup", "chain_take_within") and out[0][2]:
            held.append(out[0][2])
        assert state(pools[0]) == state(pools[1]), op
        assert logs[0] == logs[1], op
        pools[1].check_invariants()


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 5, 8, 33]), st.booleans())
def test_compiled_pool_equals_python_pool(seed: int, num_blocks: int, sink: bool) -> None:
    run(seed, num_blocks, sink)


def test_large_pool_churn() -> None:
    """Thousands of recycled cached blocks: the map's deletions keep every lookup right."""
    rng = random.Random(3)
    py, c = BlockPool(512, 16), CompiledLRUPool(512, 16)
    next_hash = 0
    for _ in range(300):
        got = [pool.allocate(64) for pool in (py, c)]
        assert got[0] == got[1]
        hashes = [((next_hash + i) * 0x9E3779B97F4A7C15) % 2**64 - 2**63 for i in range(64)]
        next_hash += 64
        assert py.cache_full_blocks(got[0], hashes) == c.cache_full_blocks(got[1], hashes) == 64
        for pool, blocks in zip((py, c), got):
            pool.free_request(blocks)
        probe = [((rng.randrange(next_hash)) * 0x9E3779B97F4A7C15) % 2**64 - 2**63 for _ in range(32)]
        assert [py.get_cached_block(h) for h in probe] == [c.get_cached_block(h) for h in probe]
    assert state(py) == state(c)
    c.check_invariants()


def test_factory_picks_the_compiled_pool_for_lru_only() -> None:
    assert isinstance(new_block_pool(8, 4), CompiledLRUPool)
    assert isinstance(new_block_pool(8, 4, policy="lfu"), BlockPool)
    with python_versions():
        assert isinstance(new_block_pool(8, 4), BlockPool)


def test_bad_free_names_the_block() -> None:
    pool = CompiledLRUPool(4, 4)
    with pytest.raises(RuntimeError, match="freeing block 2, which is not in use"):
        pool.free([2])
    with pytest.raises(IndexError, match="block 9 outside the pool of 4"):
        pool.free([9])


def test_a_bad_block_in_a_request_fails_where_the_python_pool_does() -> None:
    """Freeing tail first, the blocks after a bad id are freed before it raises (the compiled
    pool's look-ahead must not raise early)."""
    pools = [BlockPool(8, 4), CompiledLRUPool(8, 4)]
    for pool in pools:
        blocks = pool.allocate(6)
        with pytest.raises(IndexError):
            pool.free_request([99, *blocks[:5]])
    assert state(pools[0]) == state(pools[1])
    assert pools[1].num_free_blocks == 7


def test_chain_operations_check_the_chain_reaches_the_blocks() -> None:
    """The core reads the chain without bounds checks: a chain too short is refused first."""
    pool = CompiledLRUPool(8, 4)
    blocks = pool.allocate(3)
    with pytest.raises(ValueError, match="a unit chain of 1 units does not reach block 2"):
        pool.chain_cache(blocks, [5], 8, 0, 3)  # block 2 ends at token 12, in unit 1
    with pytest.raises(ValueError, match="does not reach block 2"):
        pool.chain_prefix([5], 8, 3)
    assert pool.chain_cache(blocks, [5, 6], 8, 0, 3) == 3
    assert pool.chain_prefix([5, 6], 8, 3) == 3
    assert pool.cached_map() == {5 + 4: blocks[0], 5 + 8: blocks[1], 6 + 4: blocks[2]}



@pytest.mark.parametrize("make", [lambda n: BlockPool(n, 4), lambda n: CompiledLRUPool(n, 4)])
def test_chain_registration_skips_held_hashes_and_refuses_free_blocks(make) -> None:
    """Registration finds a held hash and stores a new one in one walk of the probe run (compiled):
    a hash another block holds is skipped, before the check that the block is in use; a free
    block under a new hash is refused and nothing is stored.  Both pools alike."""
    pool = make(64)
    first = block_list(pool.allocate(3))
    assert pool.chain_cache(first, [100], 12, 0, 3) == 3  # hashes 104, 108, 112
    second = block_list(pool.allocate(3))
    assert pool.chain_cache(second, [100], 12, 0, 3) == 0  # all three held by ``first``
    pool.free_request(second)  # free, uncached
    assert pool.chain_cache(second, [100], 12, 0, 3) == 0  # held hashes: skipped, no error
    with pytest.raises(RuntimeError, match="not in use"):
        pool.chain_cache(second, [200], 12, 0, 3)
    assert pool.num_cached_blocks == 3
    assert pool.cached_map() == {104: first[0], 108: first[1], 112: first[2]}
    # Many hashes in a crowded map (a pool of 64 blocks: a map of 256 slots), then looked up.
    many = block_list(pool.allocate(40))
    assert pool.chain_cache(many, list(range(1000, 1000 + 40 * 4 * 7, 4 * 7)), 4, 0, 40) == 40
    assert pool.chain_prefix(list(range(1000, 1000 + 40 * 4 * 7, 4 * 7)), 4, 40) == 40
    if isinstance(pool, CompiledLRUPool):
        pool.core.check()

_M64 = 2**64 - 1


def _unmix(y: int) -> int:
    """The key whose splitmix64 finaliser (the core's ``_mix``) is ``y``: each step inverted."""
    def unshift(v: int, r: int) -> int:  # inverse of v ^= v >> r
        x = v
        for _ in range(64 // r + 1):
            x = v ^ (x >> r)
        return x & _M64
    y = unshift(y, 31)
    y = (y * pow(0x94D049BB133111EB, -1, 2**64)) & _M64
    y = unshift(y, 27)
    y = (y * pow(0xBF58476D1CE4E5B9, -1, 2**64)) & _M64
    y = unshift(y, 30)
    return y - 2**64 if y >= 2**63 else y  # as a signed 64-bit key


def test_keys_sharing_a_fingerprint_stay_apart() -> None:
    """A map slot keeps only 32 bits of the key's mixed hash: keys whose mixed hashes share
    them (same home slot, same fingerprint) must still be told apart by the full key, through
    inserts, lookups and deletions by backward shift."""
    low = 0x1234_5678
    keys = [_unmix((high << 32) | low) for high in range(1, 7)]
    py, c = BlockPool(8, 4), CompiledLRUPool(8, 4)
    for pool in (py, c):
        blocks = pool.allocate(4)
        assert pool.cache_full_blocks(blocks, keys[:4]) == 4
        assert [pool.get_cached_block(h) for h in keys] == blocks + [None, None]
        pool.free_request(blocks[:2])
        pool.allocate(6)  # the four never used, then the two freed: their keys leave the map
    assert [c.get_cached_block(h) for h in keys] == [py.get_cached_block(h) for h in keys]
    assert [c.get_cached_block(h) is None for h in keys] == [True, True, False, False, True, True]
    assert state(py) == state(c)
    c.check_invariants()


def test_the_free_ring_compacts_its_stale_entries_in_order() -> None:
    """Prefix hits take free blocks out of the middle of the queue and leave stale ring
    entries; freeing them again appends new ones.  Far more such cycles than the ring holds
    (it holds 8 entries for 4 blocks) force compactions, after which the queue's order, the
    allocations and every counter must still be the Python pool's."""
    rng = random.Random(5)
    keys = [11, 22, 33, 44]
    pools = [BlockPool(4, 4), CompiledLRUPool(4, 4)]
    for pool in pools:
        blocks = pool.allocate(4)
        pool.cache_full_blocks(blocks, keys)
        pool.free_request(blocks)
    for step in range(200):
        if step % 50 == 49:  # now and then, allocations recycle from the head
            out = [pool.allocate(2) for pool in pools]
            assert out[0] == out[1]
            for pool, got in zip(pools, out):
                pool.free_request(block_list(got))
        else:
            cached = [h for h in keys if pools[0].get_cached_block(h) is not None]
            hit = rng.sample(cached, rng.randint(1, min(2, len(cached))))
            taken = [pool.take_cached(hit) for pool in pools]
            assert taken[0] == taken[1]
            for pool, got in zip(pools, taken):
                pool.free_request(block_list(got))
        assert state(pools[0]) == state(pools[1]), step
        pools[1].check_invariants()


def _decoding_owners(pool, bs: int, computed: list[int]):
    """Requests mid-decode at ``computed`` tokens, as the vLLM model holds them between passes:
    ``ceil(c / bs)`` blocks of which ``c // bs`` are registered."""
    from servesim.engines.blockkv.manager import extend_unit_chain
    from servesim.kvcache.block_owner import BlockOwner
    from servesim.workload.request import Request

    owners = []
    for i, c in enumerate(computed):
        req = Request(index=i, request_id=str(i), arrival=0.0, input_length=c, output_length=50,
                      hash_ids=tuple(range(100 * i, 100 * i + -(-c // 8))), block_size=8)
        vr = BlockOwner(req)
        assert pool.allocate_to(vr.blocks, -(-c // bs))
        pool.chain_cache(vr.blocks, extend_unit_chain(req, vr.chain, c // bs, bs), 8, 0, c // bs)
        vr.n_cached = c // bs
        owners.append(vr)
    return owners


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 4, 16]), st.booleans())
def test_decode_pass_is_decode_due_then_the_replay_of_pass_0(seed: int, bs: int, caching: bool) -> None:
    """``decode_pass`` (the vLLM model's leading decodes in one call) against the engine's two
    steps: ``decode_due``'s check of the free pool, then ``replay_decode`` of the due requests."""
    import numpy as np

    from servesim.engines.blockkv import arithmetic as blocks
    from servesim.engines.blockkv.manager import extend_unit_chain

    rng = random.Random(seed)
    computed = [rng.choice([rng.randint(1, 6 * bs), bs * rng.randint(1, 5), bs * rng.randint(1, 5) - 1])
                for _ in range(rng.randint(1, 8))]
    held = sum(-(-c // bs) for c in computed)
    size = held + rng.randint(0, len(computed))  # sometimes too few free blocks for the pass
    pools = [CompiledLRUPool(size, bs) for _ in range(2)]
    owners = [_decoding_owners(pool, bs, computed) for pool in pools]
    c0 = np.array(computed, dtype=np.int64)

    def extend(vr, k):
        return extend_unit_chain(vr.req, vr.chain, k, bs)

    replay = compiled_module("engines.vllm._decode_replay")  # the vLLM model's replay on the pool's core
    ctx = replay.decode_pass(pools[0].core, owners[0], c0, bs, caching, extend, None)
    want_ctx, due, due_c, opens = blocks.decode_due(c0, bs, caching)
    free = pools[1].num_free_blocks
    if len(due) > free and opens > free:
        assert ctx is None
    else:
        assert ctx is not None and ctx.tolist() == want_ctx.tolist()
        if due:
            replay.replay_decode(pools[1].core, [owners[1][j] for j in due], due_c, 0, 1, bs, caching, extend, None)
    assert state(pools[0]) == state(pools[1])
    assert [(list(vr.blocks), vr.n_cached) for vr in owners[0]] == [(list(vr.blocks), vr.n_cached) for vr in owners[1]]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_remembered_lookups_equal_fresh_walks(seed: int) -> None:
    """``owner_prefix`` (a request's lookup remembered and brought up to date from the pool's
    uncache log) equals a fresh walk of its chain after any allocations, evictions,
    registrations and frees, in both pools; ``owner_take_within`` equals ``chain_take_within``.
    Enough evictions pass through the 40-block pool to wrap its log (1,024 entries)."""
    from servesim.kvcache.block_owner import BlockOwner
    from servesim.kvcache.hashing import id_chain

    rng = random.Random(seed)
    unit = 4  # one 4-token block per unit
    pools = [BlockPool(40, 4), CompiledLRUPool(40, 4)]
    doc = [rng.randrange(1 << 40) for _ in range(30)]
    owners = []
    for _ in range(4):  # requests sharing a document's leading blocks, each with its own tail
        own = doc[: rng.randint(0, 30)] + [rng.randrange(1 << 40) for _ in range(rng.randint(1, 12))]
        o = BlockOwner(None)
        o.chain = id_chain(own)
        owners.append(o)
    held: list[list] = []  # per hold: the block list in each pool
    walks = 0
    step = 0
    while step < 8000 or pools[1].core.uncache_log_position() <= 1100:  # until the log has wrapped
        step += 1
        assert step < 100_000
        r = rng.random()
        o = rng.choice(owners)
        if r < 0.35:
            n = rng.randint(0, len(o.chain))
            got = [p.owner_prefix(o, unit, n) for p in pools]
            fresh = [p.chain_prefix(o.chain, unit, n) for p in pools]
            assert got == fresh and got[0] == got[1], (step, got, fresh)
            walks += 1
        elif r < 0.45:
            n = pools[1].owner_prefix(o, unit, len(o.chain))
            assert n == pools[0].owner_prefix(o, unit, len(o.chain))
            need = rng.randint(0, 12)
            out = [p.owner_take_within(o, unit, n, need) for p in pools]
            assert (out[0] is None) == (out[1] is None), step
            if out[0] is not None:
                assert list(out[0]) == list(out[1])
                held.append(out)
        elif r < 0.65:  # a request takes fresh blocks (evicting cached free ones) and registers some
            k = rng.randint(1, 12)
            got = [p.allocate(k) for p in pools]
            assert got[0] == got[1]
            if got[0]:
                blocks = [block_list(g) for g in got]
                stop = min(k, len(o.chain))
                start = rng.randint(0, stop)
                for p, b in zip(pools, blocks):
                    p.chain_cache(b, o.chain, unit, start, stop)
                held.append(blocks)
        elif held:
            blocks = held.pop(rng.randrange(len(held)))
            for p, b in zip(pools, blocks):
                p.free_request(b)
        assert state(pools[0]) == state(pools[1]), step
    assert walks > 2000
