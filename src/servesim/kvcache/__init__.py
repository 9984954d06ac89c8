"""KV cache models: SGLang's radix cache, vLLM/TRT-LLM's hashed block pool, eviction
policies, a host-memory tier, and the KV events routers consume.

Modules: :mod:`.radix_cache` (tree + :class:`MatchResult`), :mod:`.token_pool` (token
accounting behind the radix cache), :mod:`.block_pool` (hashed blocks),
:mod:`.hashing` (chained block hashes from trace units), :mod:`.policies` (lru, lfu,
fifo, belady + :class:`NextUseOracle`), :mod:`.host_tier`, :mod:`.events`.
"""

from servesim.kvcache.block_pool import Block, BlockPool
from servesim.kvcache.events import EventSink, KVEvent
from servesim.kvcache.hashing import block_content_ids, block_hashes, unit_chain
from servesim.kvcache.host_tier import HostRadix, HostTier
from servesim.kvcache.policies import POLICY_NAMES, EvictionPolicy, NextUseOracle, make_policy
from servesim.kvcache.radix_cache import MatchResult, RadixCache, RadixNode
from servesim.kvcache.token_pool import TokenPool

__all__ = [
    "Block",
    "BlockPool",
    "EventSink",
    "EvictionPolicy",
    "HostRadix",
    "HostTier",
    "KVEvent",
    "MatchResult",
    "NextUseOracle",
    "POLICY_NAMES",
    "RadixCache",
    "RadixNode",
    "TokenPool",
    "block_content_ids",
    "block_hashes",
    "make_policy",
    "unit_chain",
]
