"""Unit tests of the hashed block pool and of chained block hashes."""

from __future__ import annotations

import pytest

from servesim.kvcache import BlockPool, KVEvent, block_hashes, unit_chain
from servesim.workload.request import Request, sequence_units


def test_hash_chaining_same_content_different_parent():
    a = block_hashes([(1, 512), (7, 512)], 16)
    b = block_hashes([(2, 512), (7, 512)], 16)
    assert len(a) == len(b) == 64
    assert a[:32] != b[:32]
    assert not set(a[32:]) & set(b[32:])  # block 7's content under another parent
    assert len(set(a)) == 64  # blocks within a unit differ
    # same prefix -> same hashes; a partial unit shares the full unit's leading blocks
    c = block_hashes([(1, 512), (7, 100)], 16)
    assert c == a[: 32 + 6]


def test_hashes_incremental_and_block_sizes():
    units = [(5, 512), (6, 512), (8, 300)]
    full = block_hashes(units, 16)
    assert len(full) == (1324) // 16
    assert block_hashes(units, 16, start_block=40) == full[40:]
    assert block_hashes(units, 16, n_tokens=700) == full[: 700 // 16]
    assert block_hashes(units, 16, chain=unit_chain(units)) == full
    # a block size that does not divide the unit size: block ends inside units
    h48 = block_hashes(units, 48)
    assert len(h48) == 1324 // 48 and len(set(h48)) == len(h48)
    assert block_hashes(units, 48, start_block=3) == h48[3:]
    # the 16-block ending at token 48 is the same prefix as the 48-block ending there
    assert h48[0] == full[2]


def test_hashes_from_requests_fast_path_matches_sequence_units():
    r = Request(0, "r", 0.0, 1000, 10, (3, 4))
    units = sequence_units(r, 1000)
    assert block_hashes(units, 32) == block_hashes([(3, 512), (4, 488)], 32)


def _serve(pool: BlockPool, units, bs):
    """Admit a request: take its cached prefix, allocate the rest; return its blocks."""
    hashes = block_hashes(units, bs, unit_size=bs)
    n = pool.find_cached_prefix(hashes)
    blocks = pool.take_cached(hashes[:n])
    total = sum(k for _, k in units)
    new = pool.allocate(-(-total // bs) - n)
    assert new is not None
    blocks += new
    pool.cache_full_blocks(blocks[n : len(hashes)], hashes[n:])
    return blocks, n


def test_cached_block_reused_from_free_queue():
    pool = BlockPool(8, block_size=4)
    blocks, n = _serve(pool, [(1, 4), (2, 4), (3, 2)], 4)
    assert n == 0 and len(blocks) == 3 and pool.num_cached_blocks == 2
    pool.free_request(blocks)
    assert pool.num_free_blocks == 8
    blocks2, n2 = _serve(pool, [(1, 4), (2, 4), (9, 4)], 4)
    assert n2 == 2 and blocks2[:2] == blocks[:2]
    assert pool.blocks[blocks[0]].ref == 1
    pool.check_invariants()


def test_reverse_free_evicts_tail_blocks_first():
    pool = BlockPool(4, block_size=4)
    blocks, _ = _serve(pool, [(1, 4), (2, 4), (3, 4), (4, 4)], 4)
    pool.free_request(blocks)
    # queue order now: block of unit 4, 3, 2, 1 -> allocating 2 recycles the tail blocks
    got = pool.allocate(2)
    assert got == [blocks[3], blocks[2]]
    hashes = block_hashes([(1, 4), (2, 4), (3, 4), (4, 4)], 4, unit_size=4)
    assert pool.find_cached_prefix(hashes) == 2
    pool.check_invariants()


def test_ref_counts_shared_blocks():
    pool = BlockPool(6, block_size=4)
    a, _ = _serve(pool, [(1, 4), (2, 4)], 4)
    b, n = _serve(pool, [(1, 4), (2, 4), (3, 4)], 4)
    assert n == 2 and pool.blocks[a[0]].ref == 2
    pool.free_request(a)
    assert pool.blocks[a[0]].ref == 1 and pool.num_free_blocks == 3
    assert pool.allocate(4) is None  # only 3 free, the shared ones are held
    pool.free_request(b)
    assert pool.num_free_blocks == 6
    with pytest.raises(RuntimeError):
        pool.free([b[0]])
    pool.check_invariants()


def test_allocation_evicts_hash_and_emits_events():
    events: list[KVEvent] = []
    pool = BlockPool(2, block_size=4, on_event=events.append)
    a, _ = _serve(pool, [(1, 4), (2, 4)], 4)
    assert events[-1].kind == "stored" and len(events[-1].block_hashes) == 2 and events[-1].tokens == 8
    pool.free_request(a)
    pool.allocate(1)
    assert events[-1].kind == "removed" and len(events[-1].block_hashes) == 1
    assert pool.num_cached_blocks == 1
    pool.check_invariants()


@pytest.mark.parametrize("policy", ["lfu", "fifo"])
def test_non_lru_recycles_uncached_blocks_first(policy):
    pool = BlockPool(2, block_size=4, policy=policy)
    a, _ = _serve(pool, [(1, 4), (2, 2)], 4)  # second block partial: not cached
    pool.free_request(a)
    got = pool.allocate(1)
    assert got == [a[1]]
    assert pool.num_cached_blocks == 1
    pool.check_invariants()


def test_lfu_keeps_frequent_block():
    pool = BlockPool(2, block_size=4, policy="lfu")
    for _ in range(3):
        b, _ = _serve(pool, [(1, 4)], 4)
        pool.free_request(b)
    b, _ = _serve(pool, [(2, 4)], 4)
    pool.free_request(b)
    b, _ = _serve(pool, [(3, 4)], 4)  # must recycle block of 2 (1 use) not of 1 (3 uses)
    pool.free_request(b)
    assert pool.find_cached_prefix(block_hashes([(1, 4)], 4, unit_size=4)) == 1
    assert pool.find_cached_prefix(block_hashes([(2, 4)], 4, unit_size=4)) == 0
    pool.check_invariants()


def test_hashing_speed_budget():
    """12k Mooncake-sized prompts (750 blocks of 16) hash in well under a second."""
    import time

    units = [[(i * 100 + k, 512) for k in range(23)] + [(i * 100 + 99, 224)] for i in range(2000)]
    t = time.perf_counter()
    n = sum(len(block_hashes(u, 16)) for u in units)
    dt = time.perf_counter() - t
    assert n == 2000 * 750
    assert dt < 1.0  # 2000 prompts: generous bound against noisy machines


def test_host_tier_catches_gpu_evictions():
    from servesim.kvcache.host_tier import HostTier

    host = HostTier(capacity_blocks=3, block_size=4, bytes_per_token=100.0)
    pool = BlockPool(2, block_size=4, on_event=host.on_gpu_event)
    units = [(1, 4), (2, 4)]
    a, _ = _serve(pool, units, 4)
    pool.free_request(a)
    b, _ = _serve(pool, [(7, 4), (8, 4)], 4)  # recycles both blocks of the first request
    hashes = block_hashes(units, 4, unit_size=4)
    assert pool.find_cached_prefix(hashes) == 0
    assert host.match(hashes) == 2
    assert host.load_bytes(2) == 800.0
    host.store([11, 12, 13])  # LRU within host drops the oldest
    assert len(host) == 3 and host.match(hashes) == 0
