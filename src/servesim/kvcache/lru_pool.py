"""The LRU block pool on the compiled core, and the choice between it and the Python pool.

:class:`CompiledLRUPool` has :class:`~servesim.kvcache.block_pool.BlockPool`'s interface and,
under the LRU policy (vLLM's and TensorRT-LLM's default), its exact behaviour: the same
blocks allocated, the same hashes evicted, the same events.  Its state lives in
:class:`servesim.kvcache._lru_core.LRUCore` (C arrays and a C hash map), so the per-block
work of allocation, prefix registration, freeing and the vLLM decode replay runs without
the interpreter or a Python ``dict``.

:func:`new_block_pool` picks the compiled pool for LRU when the extension is built and
not switched off (:mod:`servesim.compiled`); other policies use the Python pool.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence

from servesim.compiled import PURE_PYTHON_ENV, compiled_module
from servesim.kvcache.block_pool import Block, BlockPool, _LazyBlocks, block_list, publish_evictions
from servesim.kvcache.events import EventSink, KVEvent
from servesim.kvcache.hashing import chain_block_hashes
from servesim.kvcache.policies import EvictionPolicy, LRUPolicy, NextUseOracle

__all__ = ["CompiledLRUPool", "compiled_core_available", "new_block_pool", "PURE_PYTHON_ENV"]


#: The compiled pool's core, or None (bound at import: servesim/compiled.py's rule).
_core = compiled_module("kvcache._lru_core")


def compiled_core_available() -> bool:
    """Whether the compiled pool is built and not switched off by :data:`PURE_PYTHON_ENV`."""
    return _core is not None


def new_block_pool(
    num_blocks: int,
    block_size: int = 16,
    policy: str | EvictionPolicy = "lru",
    oracle: NextUseOracle | None = None,
    enable_caching: bool = True,
) -> BlockPool | CompiledLRUPool:
    """A block pool: the compiled one under LRU when available, else the Python one."""
    lru = policy == "lru" if isinstance(policy, str) else type(policy) is LRUPolicy
    if lru and compiled_core_available():
        return CompiledLRUPool(num_blocks, block_size, enable_caching=enable_caching)
    return BlockPool(num_blocks, block_size, policy=policy, oracle=oracle, enable_caching=enable_caching)


class _CoreColumn(Sequence):
    """Read-only per-block view of the core (``refs``, ``hashes``) for checks and :class:`Block`."""

    __slots__ = ("_one", "_all", "_n")

    def __init__(self, one: Callable[[int], object], every: Callable[[], list], n: int) -> None:
        self._one, self._all, self._n = one, every, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self._all()[i]
        if not -self._n <= i < self._n:
            raise IndexError(i)
        return self._one(i % self._n)

    def __iter__(self) -> Iterator:
        return iter(self._all())


class CompiledLRUPool:
    """LRU pool of ``num_blocks`` blocks of ``block_size`` tokens on the compiled core.

    Set :attr:`now` before operating, as for :class:`BlockPool` (LRU itself ignores it).
    """

    #: The vLLM engine replays its decode block events on :attr:`core` in C
    #: (``engines/vllm/_decode_replay.pyx``) instead of its Python replay.
    compiled = True

    def __init__(self, num_blocks: int, block_size: int = 16, on_event: EventSink | None = None,
                 enable_caching: bool = True) -> None:
        if _core is None:
            raise RuntimeError("the compiled block pool is not built (reinstall servesim with a C compiler) "
                               f"or {PURE_PYTHON_ENV} is set")
        if num_blocks < 0 or block_size < 1:
            raise ValueError(f"need num_blocks >= 0 and block_size >= 1, got {num_blocks}, {block_size}")
        self.core = _core.LRUCore(num_blocks)
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.policy = LRUPolicy()
        self.on_event = on_event
        #: Called with the hashes an allocation evicts (a host tier writes them back).
        self.on_evict: Callable[[tuple[int, ...]], None] | None = None
        self.enable_caching = enable_caching
        self.now = 0.0
        self.refs = _CoreColumn(self.core.ref, self.core.refs_list, num_blocks)
        self.hashes = _CoreColumn(self.core.hash_of, self.core.hashes_list, num_blocks)
        self.blocks: Sequence[Block] = _LazyBlocks(self)

    # ------------------------------------------------------------------ counters
    @property
    def num_free_blocks(self) -> int:
        return self.core.num_free

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.core.num_free

    @property
    def num_cached_blocks(self) -> int:
        return self.core.num_cached

    @property
    def usage(self) -> float:
        return self.num_used_blocks / self.num_blocks if self.num_blocks else 0.0

    @property
    def lru_fast_path(self) -> bool:
        """As :attr:`BlockPool.lru_fast_path`: no event sink, so allocations need no bookkeeping."""
        return self.on_event is None and self.on_evict is None

    # ------------------------------------------------------------------ prefix lookup
    def find_cached_prefix(self, hashes: Sequence[int]) -> int:
        return self.core.find_cached_prefix(hashes)

    def get_cached_block(self, h: int) -> int | None:
        return self.core.get(h)

    def count_free_hits(self, hashes: Iterable[int]) -> int:
        """How many of the cached ``hashes`` sit on free blocks (a hit on them uses up a free block)."""
        return self.core.count_free(hashes)

    def take_cached(self, hashes: Iterable[int]) -> list[int]:
        return self.core.take_cached(hashes)

    # The hashes of a request's unit chain, computed in the core (see BlockPool.chain_prefix).
    def chain_prefix(self, chain: list[int], unit_size: int, n: int) -> int:
        return self.core.chain_prefix(chain, unit_size, self.block_size, n)

    def chain_count_free(self, chain: list[int], unit_size: int, n: int) -> int:
        return self.core.chain_count_free(chain, unit_size, self.block_size, n)

    def chain_take(self, chain: list[int], unit_size: int, n: int) -> array:
        return self.core.chain_take(chain, unit_size, self.block_size, n)

    def chain_take_within(self, chain: list[int], unit_size: int, n: int, need: int) -> array | None:
        """As :meth:`BlockPool.chain_take_within`, walking the chain once."""
        return self.core.chain_take_within(chain, unit_size, self.block_size, n, need)

    def owner_prefix(self, owner, unit_size: int, n: int) -> int:
        """As :meth:`BlockPool.owner_prefix`, from the lookup remembered on ``owner``: the cost is
        the evictions since that lookup and the blocks found past its end."""
        return self.core.owner_prefix(owner, unit_size, self.block_size, n)

    def prefix_cuts(self, owner, unit_size: int, hit: int, k: int):
        """As :meth:`BlockPool.prefix_cuts`, from ``owner``'s remembered lookup (None when that is
        not the one just made)."""
        return self.core.prefix_cuts(owner, hit, k)

    def owner_take_within(self, owner, unit_size: int, n: int, need: int) -> array | None:
        """As :meth:`BlockPool.owner_take_within`, the blocks read from ``owner``'s remembered lookup."""
        return self.core.owner_take_within(owner, unit_size, self.block_size, n, need)

    def chain_cache(self, blocks: Sequence[int], chain: list[int], unit_size: int, start: int, stop: int,
                    content_ids: Sequence[int] | None = None) -> int:
        """As :meth:`BlockPool.chain_cache`; ``blocks`` is best a block list (read in place)."""
        if not self.enable_caching:
            return 0
        if self.on_event is None:
            if type(blocks) is not array:
                blocks = block_list(blocks)
            return self.core.chain_cache(blocks, chain, unit_size, self.block_size, start, stop)
        hashes = chain_block_hashes(chain, self.block_size, stop, unit_size=unit_size, start_block=start)
        return self.cache_full_blocks(blocks[start:stop], hashes)  # with its stored event

    # ------------------------------------------------------------------ allocate / free
    def allocate(self, n: int) -> list[int] | None:
        """``n`` fresh blocks from the free list's head (recycling cached ones); None if short."""
        if n > self.core.num_free:
            return None
        if n <= 0:
            return []
        if self.on_event is None and self.on_evict is None:
            return self.core.allocate(n)
        removed: list[int] = []
        out = self.core.allocate(n, removed)
        publish_evictions(self, removed)
        return out

    def allocate_to(self, blocks: array, n: int) -> bool:
        """:meth:`allocate` appending the blocks to the block list ``blocks``; False (nothing
        taken) if short."""
        if n > self.core.num_free:
            return False
        if n <= 0:
            return True
        if self.on_event is None and self.on_evict is None:
            self.core.allocate_to(blocks, n)
            return True
        removed: list[int] = []
        self.core.allocate_to(blocks, n, removed)
        publish_evictions(self, removed)
        return True

    def free(self, blocks: Iterable[int]) -> None:
        self.core.free(blocks)

    def free_request(self, blocks: Sequence[int]) -> None:
        """Free a request's blocks tail first, so its last blocks are recycled first (vLLM)."""
        if type(blocks) is array:
            self.core.free_tail_first(blocks)
        else:
            self.core.free(reversed(blocks))

    def cache_full_blocks(self, blocks: Sequence[int], hashes: Sequence[int],
                          content_ids: Sequence[int] | None = None) -> int:
        """Register full blocks under their hashes (``content_ids`` matter only to Belady)."""
        if not self.enable_caching:
            return 0
        if self.on_event is None:
            return self.core.cache_full_blocks(blocks, hashes)
        stored: list[int] = []
        n = self.core.cache_full_blocks(blocks, hashes, stored)
        if stored:
            self.on_event(KVEvent("stored", tuple(stored), len(stored) * self.block_size))
        return n

    # ------------------------------------------------------------------ views and checks
    def free_order(self) -> list[int]:
        """The free blocks, next recycled first."""
        return self.core.free_order()

    def cached_map(self) -> dict[int, int]:
        """``{hash: block}`` of the cached blocks."""
        return self.core.cached_map()

    def check_invariants(self) -> None:
        """Raise AssertionError unless the core's free list, reference counts and map agree."""
        self.core.check()
