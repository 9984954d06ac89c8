"""Per-request cost of the vLLM / TensorRT-LLM block pool, against the floor its hash map sets.

A steady-state cycle like a vLLM worker's under prefix caching: each request allocates
``--blocks`` blocks from the LRU free queue (every recycled block is cached, so each one
evicts a hash), registers all but its last block under fresh hashes, and frees the blocks
of the request ``--live`` places before it (tail first).  Printed, in µs per request:

* ``pool``: :meth:`BlockPool.allocate`, :meth:`BlockPool.cache_full_blocks` and
  :meth:`BlockPool.free_request` as the engines call them;
* ``compiled pool``: the same calls on :class:`~servesim.kvcache.lru_pool.CompiledLRUPool`
  (the engines' pool under LRU when the compiled core is built), and its ratio to the
  Python pool measured in the same run;
* ``dict floor``: only the hash-map work those calls cannot avoid — one ``del`` of an
  evicted hash and one insert of a new one per block, on a dict of the pool's size holding
  the same kind of keys — done in C with no Python loop (``map`` over bound methods).

The Python pool's cost over the floor is what any rewrite of its loops in Python could
save; the floor stays as long as every full block is a key of a Python dict.  The compiled
pool keeps its map in C and is not bound by it.
Usage::

    python benchmarks/bench_block_pool.py                  # 46k-block pool, 190 blocks per request
    python benchmarks/bench_block_pool.py --blocks 750     # Mooncake-sized prompts
    python benchmarks/bench_block_pool.py --pools 4        # four workers' pools sharing the caches
"""

from __future__ import annotations

import argparse
import random
import time
from collections import deque

from servesim.kvcache.block_pool import BlockPool
from servesim.kvcache.lru_pool import CompiledLRUPool, compiled_core_available


def fresh_hashes(rng: random.Random, n: int) -> list[int]:
    """Hash-like keys: 62-bit integers, as Python's ``hash`` of a tuple spreads them."""
    return [rng.getrandbits(62) for _ in range(n)]


def pool_cycle(pools: list, blocks: int, live: int, requests: int, seed: int) -> tuple[float, float, float]:
    """µs per request of allocate, cache_full_blocks and free_request after a warm-up.

    Requests go round-robin to ``pools`` (the workers of a deployment), whose state then
    competes for the CPU's caches as the workers' pools do in a run.
    """
    rng = random.Random(seed)
    helds: list[deque[list[int]]] = [deque() for _ in pools]
    spent = [0.0, 0.0, 0.0]
    for r in range(2 * requests):
        pool = pools[r % len(pools)]
        held = helds[r % len(pools)]
        keys = fresh_hashes(rng, blocks - 1)
        t0 = time.perf_counter()
        got = pool.allocate(blocks)
        t1 = time.perf_counter()
        pool.cache_full_blocks(got[:-1], keys)
        t2 = time.perf_counter()
        held.append(got)
        t3 = t4 = 0.0
        if len(held) > live:
            old = held.popleft()
            t3 = time.perf_counter()
            pool.free_request(old)
            t4 = time.perf_counter()
        if r >= requests:  # the first half fills the pool and its hash map
            spent[0] += t1 - t0
            spent[1] += t2 - t1
            spent[2] += t4 - t3
    return tuple(s / requests * 1e6 for s in spent)


def dict_floor(num_blocks: int, blocks: int, requests: int, seed: int) -> float:
    """µs per request of ``blocks`` deletes and inserts on a dict of ``num_blocks`` such keys."""
    rng = random.Random(seed)
    table = dict.fromkeys(fresh_hashes(rng, num_blocks), 0)
    order = deque(table)  # eviction order: oldest first, as the LRU queue recycles them
    spent = 0.0
    for _ in range(requests):
        evicted = [order.popleft() for _ in range(blocks)]
        new = fresh_hashes(rng, blocks)
        t0 = time.perf_counter()
        deque(map(table.__delitem__, evicted), maxlen=0)
        table.update(zip(new, range(blocks)))
        spent += time.perf_counter() - t0
        order.extend(new)
    return spent / requests * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-blocks", type=int, default=46_000, help="pool size (Qwen3-32B FP8 on H200: ~46k)")
    ap.add_argument("--blocks", type=int, default=190, help="blocks per request (workload 1: ~190)")
    ap.add_argument("--live", type=int, default=150, help="requests holding blocks at once, per pool")
    ap.add_argument("--requests", type=int, default=3000, help="timed requests (after as many warm-up)")
    ap.add_argument("--pools", type=int, default=1, help="pools served round-robin (workload 1: 4 workers)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    alloc, cache, free = pool_cycle([BlockPool(a.num_blocks, 16) for _ in range(a.pools)], a.blocks, a.live,
                                    a.requests, a.seed)
    floor = dict_floor(a.num_blocks, a.blocks, a.requests, a.seed)
    total = alloc + cache + free
    print(f"pool: allocate {alloc:.1f} + cache {cache:.1f} + free {free:.1f} = {total:.1f} µs per request "
          f"({total / a.blocks * 1e3:.0f} ns per block)")
    print(f"dict floor: {floor:.1f} µs per request ({floor / a.blocks * 1e3:.0f} ns per block); "
          f"pool / floor = {total / floor:.2f}")
    if compiled_core_available():
        c_alloc, c_cache, c_free = pool_cycle([CompiledLRUPool(a.num_blocks, 16) for _ in range(a.pools)],
                                              a.blocks, a.live, a.requests, a.seed)
        c_total = c_alloc + c_cache + c_free
        print(f"compiled pool: allocate {c_alloc:.1f} + cache {c_cache:.1f} + free {c_free:.1f} = "
              f"{c_total:.1f} µs per request ({c_total / a.blocks * 1e3:.0f} ns per block); "
              f"compiled / pool = {c_total / total:.3f}, compiled / floor = {c_total / floor:.2f}")
    else:
        print("compiled pool: not built (or SERVESIM_PURE_PYTHON is set)")


if __name__ == "__main__":
    main()
