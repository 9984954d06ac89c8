"""The block-KV half of the vLLM and TensorRT-LLM engine models.

Both engines keep KV in fixed-size blocks taken from one hashed block pool
(``kvcache/lru_pool.py``), find a request's cached prefix by walking its chained block
hashes, register full blocks as they fill, optionally keep blocks recycled from the GPU in a
host-memory tier, and free a request's blocks tail first when it finishes or is preempted.
That work is the same in both; only *when* it happens is a scheduling decision, which each
engine makes in its own upstream vocabulary (vLLM's ``num_computed_tokens`` and
preemption, TensorRT-LLM's context/generation phases and capacity policies).

:class:`BlockKVEngine` owns it: the pool, the host tier, the hash chains, lookup,
registration, allocation and freeing, the reject reasons for prompts that can never fit,
the published snapshot and the KV checks of ``check_invariants``.  The vLLM and TensorRT-LLM
engines derive from it and call these methods from their schedulers.  A request's block
state is a :class:`~servesim.kvcache.block_owner.BlockOwner` (its blocks, unit chain and
registered prefix), which each engine's request record extends.

(Plain methods on a base class rather than a separate manager object: compiled,
``manager.pxd``, the engines call them as C methods on themselves, and the pool is read
from one struct field, as before the split; a decode pass calls several of them.)
"""

from __future__ import annotations

from servesim.engines.base import Engine, EngineLimits, EngineSnapshot
from servesim.engines.blockkv.arithmetic import decode_arithmetic
from servesim.engines.host import host_link
from servesim.errors import ConfigError
from servesim.kvcache.block_owner import BlockOwner
from servesim.kvcache.block_pool import block_list
from servesim.kvcache.hashing import block_content_ids, chain_block_hashes, extend_chain, extend_chain_slice
from servesim.kvcache.host_tier import HostTier
from servesim.kvcache.lru_pool import new_block_pool
from servesim.metrics.recorder import Status
from servesim.workload.request import Request, sequence_block_ids, sequence_units


def extend_unit_chain(req: Request, chain, n_blocks: int, block_size: int):
    """Extend ``chain`` (the request's unit chain so far, a chain list or a list, in place) to
    reach the trace unit holding the last token of its first ``n_blocks`` blocks of
    ``block_size`` tokens; returns it."""
    us = req.block_size
    need = (n_blocks * block_size - 1) // us + 1 if n_blocks > 0 else 0  # units
    have = len(chain)
    if need > have:  # only the units not chained yet: a decode extends by one
        ids = req.hash_ids
        head = min(need, len(ids))
        if have < head:  # the prompt's units: its ids, read in place
            extend_chain_slice(chain, ids, have, head)
            have = head
        if need > have:  # the output's and generated units
            extend_chain(chain, sequence_block_ids(req, have, need))
    return chain


def extend_block_hashes(req: Request, hashes: list[int], chain: list[int], n_blocks: int,
                        block_size: int) -> list[int]:
    """Extend ``hashes`` (the request's full-block hashes so far) to ``n_blocks`` blocks.

    ``chain`` caches the request's unit chain; both lists are extended in place.  The list
    is extended to the end of the trace unit holding the last block wanted (the hashes of
    one unit are one ``range``), so decoding extends it once per unit, not once per block;
    callers slice it to what they need.
    """
    have = len(hashes)
    if n_blocks > have:
        us = req.block_size
        n_blocks = max(n_blocks, ((n_blocks * block_size - 1) // us + 1) * us // block_size)
        extend_unit_chain(req, chain, n_blocks, block_size)
        hashes.extend(chain_block_hashes(chain, block_size, n_blocks, unit_size=us, start_block=have))
    return hashes


class BlockKVEngine(Engine):
    """An engine whose KV cache is a hashed block pool with an optional host tier.

    Subclasses call :meth:`_init_blocks` from their ``__init__`` and schedule in their own
    terms; every block the engine takes, registers or frees goes through the methods here.
    """

    def _init_blocks(self, engine: str, limits: EngineLimits, block_size: int, reserved_blocks: int,
                     eviction_policy: str, caching: bool, caching_key: str, caching_name: str, oracle,
                     host_kv_gb: float,
                     host_link_gbs: float | None, host_load_overlap: bool) -> None:
        """Set up the pool and the host tier.

        ``reserved_blocks``: blocks of the KV budget the engine never hands out (vLLM's null
        block).  ``caching_key``, ``caching_name``: the option that turns prefix caching on and
        the engine's name for it, for the error when a host tier is asked for without it.
        """
        self.bs = bs = block_size
        self.num_blocks = max(limits.kv_capacity_tokens // bs - reserved_blocks, 0)
        self.capacity = self.num_blocks * bs
        self.caching = caching
        #: Per-pass decode arithmetic: compiled when built (blockkv/arithmetic.py:decode_arithmetic).
        self._arith = decode_arithmetic()
        self.pool = new_block_pool(self.num_blocks, bs, policy=eviction_policy, oracle=oracle,
                                   enable_caching=caching)
        self._belady = eviction_policy == "belady"
        self.retractions = 0
        #: Host tier: blocks recycled from the GPU cache are kept in host memory by hash (LRU);
        #: a prefix found there is loaded instead of recomputed.
        self.hostlink = host_link(engine, host_kv_gb, host_link_gbs, host_load_overlap, limits, granule=bs)
        self.host: HostTier | None = None
        if self.hostlink is not None:
            if not caching:
                raise ConfigError(f"deployment.engine.host_kv_gb: a host KV tier needs {caching_name}; "
                                  f"{caching_key} is false")
            self.host = HostTier(self.hostlink.capacity_tokens // bs, bs, self.hostlink.bytes_per_token,
                                 on_event=self._host_event)
            self.pool.on_evict = self.host.store
        self.host_loaded_tokens = 0

    def _host_event(self, event) -> None:
        """Host-tier events go wherever the GPU pool's events go (tier "host")."""
        sink = self.pool.on_event
        if sink is not None:
            sink(event)

    # -- arrivals -------------------------------------------------------------------------
    def _reject_unfit(self, req: Request, now: float, max_len: int, max_len_key: str) -> bool:
        """Reject a prompt that leaves no room for one output token within ``max_len`` (the
        option ``max_len_key``) or the KV pool; True when rejected.  One reason per cause (not
        per length), so the summary can count them."""
        n = req.input_length
        if n + 1 > max_len:
            self._reject(req, now, f"prompt leaves no room for output within {max_len_key} {max_len}")
            return True
        if n + 1 > self.capacity:
            self._reject(req, now, f"prompt exceeds the KV cache of {self.capacity} tokens")
            return True
        return False

    # -- block hashes -----------------------------------------------------------------------
    # A request's block hashes follow from its unit chain (kvcache/hashing.py); the pool's
    # ``chain_*`` operations compute them, so the engine keeps only the chain.
    def _chain(self, owner: BlockOwner, n_blocks: int):
        """The request's unit chain, extended to cover its first ``n_blocks`` blocks."""
        return extend_unit_chain(owner.req, owner.chain, n_blocks, self.bs)

    def _hashes(self, owner: BlockOwner, start: int, stop: int) -> list[int]:
        """The hashes of the request's blocks ``start..stop-1`` (for the host tier)."""
        return chain_block_hashes(self._chain(owner, stop), self.bs, stop, unit_size=owner.req.block_size,
                                  start_block=start)

    # -- lookup -------------------------------------------------------------------------------
    def _cached_blocks(self, owner: BlockOwner, tokens: int) -> int:
        """Blocks of the request's first ``tokens`` tokens found in the prefix cache, capped at
        ``tokens - 1`` so that the last token is computed (both engines sample from it)."""
        if not self.caching:
            return 0
        cap = (tokens - 1) // self.bs
        if cap <= 0:
            return 0
        self._chain(owner, cap)
        return self.pool.owner_prefix(owner, owner.req.block_size, cap)

    def _host_blocks(self, owner: BlockOwner, hit: int, tokens: int) -> int:
        """Blocks after the GPU hit ``hit`` found on the host tier (same cap as :meth:`_cached_blocks`)."""
        cap = (tokens - 1) // self.bs
        if self.host is None or cap <= hit:
            return 0
        return self.host.match(self._hashes(owner, 0, cap), hit, touch=False)

    # -- registration ---------------------------------------------------------------------------
    def _cache_full(self, owner: BlockOwner, n_full: int) -> None:
        """Register the request's first ``n_full`` blocks (those not registered yet) in the
        prefix cache.  Blocks from ``owner.private_from`` on are passed over: only the request
        itself could look them up (vLLM's private blocks)."""
        if n_full <= owner.n_cached:
            return
        stop = min(n_full, owner.private_from)
        if owner.n_cached < stop:
            self._register(owner, owner.n_cached, stop)
        owner.n_cached = n_full

    def _register(self, owner: BlockOwner, start: int, stop: int) -> None:
        """Register the request's blocks ``start..stop-1`` in the prefix cache."""
        ids = None
        if self._belady:
            ids = block_content_ids(sequence_units(owner.req, stop * self.bs), self.bs, stop,
                                    unit_size=owner.req.block_size, start_block=start)
        self.pool.chain_cache(owner.blocks, self._chain(owner, stop), owner.req.block_size, start, stop, ids)

    # -- freeing ------------------------------------------------------------------------------
    def _free_blocks(self, owner: BlockOwner) -> None:
        """Return the request's blocks to the pool (tail first; cached ones stay reusable)."""
        self.pool.free_request(owner.blocks)
        owner.blocks = block_list()

    def _finish_owner(self, owner: BlockOwner, end: float, cut_reason: str, cut: bool) -> None:
        """Free a finished request's blocks and record it: completed, with ``cut_reason`` when
        its output was cut at the engine's length limit (``cut``)."""
        self._free_blocks(owner)
        if cut:
            self.rec.finished(owner.req.index, end, Status.COMPLETED, cut_reason)
            self.terminated.append(owner.req)
        else:
            self._finish(owner.req, end)

    # -- the engine interface's KV questions (engines/base.py) ----------------------------------
    def kv_cache(self):
        return self.pool

    def kv_block_size(self) -> int | None:
        return self.bs

    def held_prefix_tokens(self, req: Request) -> int:
        """Prompt tokens in full blocks found in the prefix cache (none without caching)."""
        n = req.input_length - 1
        if n <= 0 or not self.caching:
            return 0
        bs = self.bs
        cap = n // bs
        if cap <= 0:
            return 0
        hashes = extend_block_hashes(req, [], [], cap, bs)
        return int(self.pool.find_cached_prefix(hashes[:cap])) * bs

    # -- state ---------------------------------------------------------------------------------
    def _kv_snapshot(self, running: int, waiting: int, outstanding: int) -> EngineSnapshot:
        """The published state, with this engine's KV usage."""
        return EngineSnapshot(
            running=running,
            waiting=waiting,
            kv_used_tokens=self.pool.num_used_blocks * self.bs,
            kv_capacity_tokens=self.capacity,
            prompt_tokens=self.prompt_tokens,
            cached_prompt_tokens=self.cached_prompt_tokens,
            outstanding_tokens=outstanding,
        )

    def _check_blocks(self, held: int) -> None:
        """Block conservation: ``held`` (the blocks the engine's requests hold) is every
        reference the pool counts, and the host tier is within its capacity."""
        pool = self.pool
        assert sum(pool.refs) == held, (sum(pool.refs), held)
        assert pool.num_free_blocks + pool.num_used_blocks == self.num_blocks
        if self.host is not None:
            self.host.check_invariants()
            assert self.host.size_tokens <= self.hostlink.capacity_tokens
