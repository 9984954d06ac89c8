"""Token-granular KV memory accounting for the radix cache (SGLang's token-to-KV pool).

SGLang allocates KV per token (per page when ``page_size > 1``).  The simulator needs no
slot indices, only counts, split three ways so that conservation is checkable:

* ``free``: unallocated tokens;
* ``private``: allocated to running requests and not (yet) owned by the radix tree;
* ``cached``: owned by the radix tree (shared prefixes and finished requests' KV).

``free + private + cached == capacity`` always.  Requests move tokens free → private
(:meth:`alloc`) and back (:meth:`free`); the tree moves them private → cached on insert
(:meth:`adopt`) and cached → free on eviction (:meth:`release_cached`).
"""

from __future__ import annotations


class TokenPool:
    """Counts of free, request-private and tree-cached KV tokens."""

    __slots__ = ("capacity", "free_tokens", "private_tokens", "cached_tokens")

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"token pool capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self.free_tokens = capacity
        self.private_tokens = 0
        self.cached_tokens = 0

    def alloc(self, n: int) -> bool:
        """Take ``n`` free tokens for a request; False (and no change) if not enough are free."""
        if n > self.free_tokens:
            return False
        self.free_tokens -= n
        self.private_tokens += n
        return True

    def free(self, n: int) -> None:
        """Return ``n`` request-private tokens to the free pool."""
        if n > self.private_tokens or n < 0:
            raise ValueError(f"freeing {n} tokens but requests hold only {self.private_tokens}")
        self.private_tokens -= n
        self.free_tokens += n

    def adopt(self, n: int) -> None:
        """The tree takes ownership of ``n`` request-private tokens (insert)."""
        if n > self.private_tokens or n < 0:
            raise ValueError(f"tree adopting {n} tokens but requests hold only {self.private_tokens}")
        self.private_tokens -= n
        self.cached_tokens += n

    def release_cached(self, n: int) -> None:
        """``n`` tree tokens were evicted and are free again."""
        if n > self.cached_tokens or n < 0:
            raise ValueError(f"releasing {n} cached tokens but the tree holds {self.cached_tokens}")
        self.cached_tokens -= n
        self.free_tokens += n

    def check(self) -> None:
        """Raise AssertionError unless the three counts are >= 0 and sum to capacity."""
        assert self.free_tokens >= 0 and self.private_tokens >= 0 and self.cached_tokens >= 0, self
        assert self.free_tokens + self.private_tokens + self.cached_tokens == self.capacity, self

    def __repr__(self) -> str:
        return (
            f"TokenPool(capacity={self.capacity}, free={self.free_tokens}, "
            f"private={self.private_tokens}, cached={self.cached_tokens})"
        )
