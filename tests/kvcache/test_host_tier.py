"""The host-memory KV tier on its own: radix host tier (SGLang), hashed host tier (vLLM,
TensorRT-LLM), the GPU caches' eviction hooks, and the tier's settings."""

from __future__ import annotations

import pytest

from servesim.engines.base import EngineLimits
from servesim.engines.host import NVLINK_C2C_GBS, PCIE4_GBS, PCIE5_GBS, default_host_link_gbs, host_link
from servesim.errors import ConfigError
from servesim.kvcache.block_pool import BlockPool
from servesim.kvcache.hashing import block_hashes
from servesim.kvcache.host_tier import HostRadix, HostTier
from servesim.kvcache.radix_cache import RadixCache
from servesim.kvcache.segments import canonical_segments


def seq(*blocks: tuple[int, int]) -> list[tuple[int, int]]:
    return list(blocks)


def test_canonical_segments_merge_split_blocks():
    assert canonical_segments([(5, 0, 100), (5, 100, 512), (6, 0, 40)]) == [(5, 0, 512), (6, 0, 40)]
    assert canonical_segments([(5, 0, 512), (5, 0, 10)]) == [(5, 0, 512), (5, 0, 10)]


def test_gpu_eviction_writes_the_whole_path_to_host():
    gpu = RadixCache(1000)
    host = HostRadix(5000)
    gpu.on_evict = host.store
    a = seq((1, 64), (2, 64), (3, 30))
    b = seq((1, 64), (2, 64), (4, 50))
    for units in (a, b):
        n = sum(k for _, k in units)
        assert gpu.alloc(n)
        present = gpu.insert(units)
        gpu.free(present)  # the shared prefix was already cached
    # evict everything: each leaf goes to host with its ancestors
    gpu.evict(10_000)
    assert gpu.total_size == 0
    assert host.match(a) == 158 and host.match(b) == 178
    assert host.size == 64 + 64 + 30 + 50  # the shared path is stored once
    host.check_invariants()
    gpu.check_invariants()


def test_host_radix_evicts_lru_paths_within_capacity():
    events = []
    host = HostRadix(200, on_event=events.append)
    p1 = [(1, 0, 100)]
    p2 = [(2, 0, 100)]
    p3 = [(3, 0, 100)]
    assert host.store(p1, now=1.0) == 100
    assert host.store(p2, now=2.0) == 100
    assert host.store(p1, now=3.0) == 0  # already held: touched, nothing new
    assert host.store(p3, now=4.0) == 100  # p2 is the least recently used
    assert host.match([(1, 100)]) == 100 and host.match([(2, 100)]) == 0 and host.match([(3, 100)]) == 100
    assert host.size == 200
    host.check_invariants()
    assert {e.tier for e in events} == {"host"}
    stored = sum(e.tokens for e in events if e.kind == "stored")
    removed = sum(e.tokens for e in events if e.kind == "removed")
    assert stored - removed == host.size


def test_host_radix_keeps_the_head_of_a_path_longer_than_the_host():
    host = HostRadix(96, page_size=16)
    assert host.store([(1, 0, 512), (2, 0, 100)]) == 96
    assert host.match([(1, 512)]) == 96
    host.check_invariants()


def test_shared_prefix_survives_storing_a_sibling_when_full():
    host = HostRadix(150)
    host.store([(1, 0, 100), (2, 0, 50)])
    # Storing a sibling path needs 40 tokens: the only host leaf (block 2's 50) goes, the
    # shared 100 tokens stay (they were locked while the host made room).
    assert host.store([(1, 0, 100), (3, 0, 40)]) == 40
    assert host.match([(1, 100), (3, 40)]) == 140
    assert host.match([(1, 100), (2, 50)]) == 100
    host.check_invariants()


def test_block_pool_on_evict_feeds_the_hashed_host_tier_independently_of_events():
    host = HostTier(capacity_blocks=8, block_size=4, bytes_per_token=10.0)
    published = []
    pool = BlockPool(2, block_size=4, on_event=published.append)
    pool.on_evict = host.store
    units = [(1, 4), (2, 4)]
    hashes = block_hashes(units, 4, unit_size=4)
    blocks = pool.allocate(2)
    pool.cache_full_blocks(blocks, hashes)
    pool.free_request(blocks)
    pool.allocate(2)  # recycles both cached blocks
    assert host.match(hashes, touch=False) == 2
    assert host.size_tokens == 8
    assert [e.tier for e in published] == ["gpu", "gpu"]  # stored, removed: GPU events unchanged
    host.check_invariants()


def test_hashed_host_tier_match_without_touch_keeps_lru_order():
    host = HostTier(capacity_blocks=2, block_size=1, bytes_per_token=1.0)
    host.store([1, 2])
    assert host.match([1], touch=False) == 1
    host.store([3])  # 1 is still the oldest
    assert 1 not in host and 2 in host and 3 in host
    host.touch([2])
    host.store([4])  # 3 is now the oldest
    assert 3 not in host and 2 in host and 4 in host
    assert host.match([9, 2, 4], start_block=1) == 2


def test_default_host_link_by_gpu():
    assert default_host_link_gbs("H100-SXM") == PCIE5_GBS
    assert default_host_link_gbs("B200") == PCIE5_GBS
    assert default_host_link_gbs("GB200") == NVLINK_C2C_GBS
    assert default_host_link_gbs("A100-80GB") == PCIE4_GBS
    assert default_host_link_gbs("something new") == PCIE5_GBS


def test_host_link_capacity_and_load_time():
    # Llama-3.1-8B bf16, tp 2: 65,536 bytes per token per GPU, 131,072 per worker.
    limits = EngineLimits(1000, 4096, kv_bytes_per_token=65536.0, kv_shards=2, gpu_name="h100_sxm")
    hl = host_link("vllm", 64.0, None, False, limits, granule=16)
    assert hl.capacity_tokens == (int(64e9 // 131072) // 16) * 16
    assert hl.link_gbs == PCIE5_GBS
    # each GPU loads its half over its own link: 10,000 tokens x 65,536 B / 50 GB/s
    assert hl.load_seconds(10_000) == pytest.approx(10_000 * 65536 / 50e9)
    assert host_link("vllm", 0.0, None, False, limits) is None
    with pytest.raises(ConfigError, match="host_kv_gb"):
        host_link("vllm", 1.0, None, False, EngineLimits(1000, 4096))
