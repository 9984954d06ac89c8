"""Block arithmetic shared by the block-pool engines (vLLM, TensorRT-LLM)."""

from __future__ import annotations

import numpy as np


def stretch_within_free_blocks(computed: np.ndarray, block_size: int, free_blocks: int, limit: int) -> int:
    """Longest decode stretch, at most ``limit`` passes, whose new blocks fit in ``free_blocks``.

    ``computed[j]`` is request ``j``'s KV length before the stretch.  Passes 1..k-1 after the
    first (whose blocks are already allocated) open ``floor((c+k-1)/bs) - floor(c/bs)`` blocks
    per request; that count grows with ``k``, so a binary search finds the largest ``k``.
    """
    if limit <= 1:
        return 1
    base = computed // block_size

    def fits(k: int) -> bool:
        return int(((computed + k - 1) // block_size - base).sum()) <= free_blocks

    lo, hi = 1, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo
