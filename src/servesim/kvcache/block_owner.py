"""What a block pool reads and writes of a request that holds blocks.

A vLLM request's engine state (``engines/vllm/fast_path.py:VReq``) derives from :class:`BlockOwner`.
Compiled, this module is a C type (``block_owner.pxd``), so the vLLM model's compiled decode replay
(``engines/vllm/_decode_replay.pyx:replay_decode``), which touches a few of these fields for
every block a decode opens or fills, reads and writes them as struct fields; through Python
attribute lookups they had cost about as much as the replay's own work.
"""

from __future__ import annotations

from servesim.kvcache.block_pool import block_list
from servesim.kvcache.hashing import chain_list
from servesim.workload.request import Request

#: ``BlockOwner.private_from`` of a request whose blocks are all registered as they fill.
NO_PRIVATE_BLOCKS = 1 << 62


class BlockOwner:
    """A request's blocks, its unit chain and how many of its blocks are registered."""

    __slots__ = ("req", "blocks", "chain", "n_cached", "private_from", "memo", "memo_at", "memo_of", "memo_tag")

    def __init__(self, req: Request) -> None:
        self._own(req)

    def _own(self, req: Request) -> None:
        """Set the fields for ``req`` (what ``__init__`` does; a subclass's ``__init__`` calls
        it directly, compiled a C call rather than the base type's ``__init__`` through Python)."""
        self.req = req
        #: A block list (kvcache/block_pool.py:block_list): C ints, no Python int per block.
        self.blocks = block_list()
        #: The sequence's unit chain so far (kvcache/hashing.py), a chain list (hashing.py:chain_list):
        #: its block hashes follow from it.
        self.chain = chain_list()
        #: Leading blocks already registered in the prefix cache (or taken from it), or
        #: passed over as private (below).
        self.n_cached = 0
        #: The first block whose hash no other request can produce (see
        #: ``engines/vllm.py:VLLMEngine._private_from``): its blocks from here on are
        #: registered only if the request is preempted, since only the request itself could
        #: look them up.  :data:`NO_PRIVATE_BLOCKS` when every block is registered as it fills.
        self.private_from = NO_PRIVATE_BLOCKS
        self.forget_prefix()

    def forget_prefix(self) -> None:
        """Drop the remembered prefix-cache lookup (see ``kvcache/_lru_core.pyx:LRUCore.owner_prefix``)."""
        #: The blocks holding the request's leading cached blocks at its last lookup (a block list).
        self.memo = block_list()
        #: The pool's uncache-log position at that lookup (-1: none), and the pool's core.
        self.memo_at = -1
        self.memo_of = None
        #: The pool's mark on the memo's blocks (see ``LRUCore``), or -1.
        self.memo_tag = -1
