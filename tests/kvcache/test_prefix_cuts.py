"""``prefix_cuts`` (how the next allocations would cut a blocked request's cached prefix) gives
the same answer on the compiled LRU pool as on the Python pool, and that answer is what the
allocations then do."""

from __future__ import annotations

import random

import pytest

from servesim.kvcache.block_owner import BlockOwner
from servesim.kvcache.block_pool import BlockPool
from servesim.kvcache.hashing import chain_block_hashes, id_chain
from servesim.kvcache.lru_pool import CompiledLRUPool, compiled_core_available
from servesim.workload.request import Request

pytestmark = pytest.mark.skipif(not compiled_core_available(), reason="compiled core not built")

BS, US = 4, 8


def _owner(ids: list[int], index: int) -> BlockOwner:
    o = BlockOwner(Request(index=index, request_id=str(index), arrival=0.0, input_length=len(ids) * US,
                           output_length=1, hash_ids=tuple(ids), block_size=US))
    o.chain = id_chain(ids)
    return o


@pytest.mark.parametrize("seed", range(30))
def test_compiled_prefix_cuts_equal_python_and_the_allocations(seed):
    rng = random.Random(seed)
    pools = [BlockPool(40, BS), CompiledLRUPool(40, BS)]
    docs = [[rng.randrange(6) for _ in range(rng.randrange(1, 6))] for _ in range(8)]
    held = [[] for _ in pools]
    for step in range(30):  # requests come and go: cached free blocks in some LRU order
        ids = docs[rng.randrange(len(docs))] + [100 + step]
        o = [_owner(ids, step) for _ in pools]
        n = len(ids) * US // BS
        got = [pool.owner_prefix(own, US, n) for pool, own in zip(pools, o)]
        assert got[0] == got[1]
        hit = got[0]
        k = rng.randrange(0, 45)
        order = pools[0].free_order()[:k]
        cuts = [pool.prefix_cuts(own, US, hit, k) for pool, own in zip(pools, o)]
        assert cuts[0] == cuts[1]
        prefix = [pools[0]._hash_to_block[h] for h in chain_block_hashes(o[0].chain, BS, hit, unit_size=US)]
        free_below = [sum(1 for b in prefix[:q] if pools[0].refs[b] == 0) for q in range(hit + 1)]
        want, cur = [], hit
        for pos, b in enumerate(order):
            if b in prefix and prefix.index(b) < cur:
                cur = prefix.index(b)
                want.append((pos, cur, free_below[cur]))
        assert cuts[0] == (free_below[hit], want)
        drop, which = rng.random() < 0.4, rng.randrange(4)  # the same choices for both pools
        for j, (pool, own) in enumerate(zip(pools, o)):
            blocks = pool.owner_take_within(own, US, hit, n - hit)
            if blocks is not None:
                pool.allocate_to(blocks, n - hit)
                pool.chain_cache(blocks, own.chain, US, hit, n)
                held[j].append(blocks)
            if held[j] and (len(held[j]) > 3 or drop):
                pool.free_request(held[j].pop(which % len(held[j])))
