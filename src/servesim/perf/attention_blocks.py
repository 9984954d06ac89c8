"""Flash attention's block geometry: how many (query, key) blocks a prefill chunk computes and
which of its bytes no math hides.

Pure counting, apart from the op model that prices it (:mod:`servesim.perf.kernels`) and shared
with the step-time pass (:mod:`servesim.perf.analytic`), which calls these per chunk on Python
numbers where the op model calls them on numpy arrays of shapes.
"""

from __future__ import annotations

import numpy as np

#: flash-attention query block (rows of queries per thread block) and key block.
ATTN_BLOCK = 128


def prefill_exposed_bytes(q_width, o_width, kv_width, kv_bytes):
    """Bytes per new token of a prefill attention op that do not hide under its math: the query
    read (``q_width`` bf16 values per token over all its heads) and the output written
    (``o_width``), and the new keys and values (``kv_width`` values per token: ``2·kv_heads·
    head_dim``, or MLA's latent and rope key) read in bf16 and written into the cache at
    ``kv_bytes``.

    The cache write is its own kernel before the attention kernel (vLLM's reshape-and-cache,
    SGLang's KV-buffer store, TensorRT-LLM's QKV preprocessing, which also applies the rotary
    embedding in place), so nothing overlaps it.  A flash-attention thread block loads its
    query tile before its first Q·Kᵀ and stores its output after its last P·V: with few key
    blocks per query block (a chunk of up to a few hundred tokens) there is no math for those
    to stream under, and beyond that they are a vanishing share of the time.  Counted inside
    ``max(math, memory)`` the op model priced the tables' chunks of 128-512 tokens 11-26% too
    fast on every engine and GPU (within one 128-row block a 32-token chunk takes ~2× a
    1-token chunk's time at 256 sequences: H200 SGLang 57 → 112 µs with the same blocks).
    Takes numbers or numpy arrays."""
    return q_width * 2.0 + o_width * 2.0 + kv_width * (2.0 + kv_bytes)


def window_key_blocks(n, c, w):
    """Key blocks a flash-attention kernel computes for a chunk of ``n`` queries after ``c``
    cached tokens when each query sees only its last ``w`` keys (``w > 0``), summed over the
    chunk's :data:`ATTN_BLOCK`-row query blocks.

    A windowed kernel skips whole key blocks outside the window, not single keys: a query block
    spans ``ATTN_BLOCK + w − 1`` keys, so it computes the diagonal block and every block the window
    reaches into in full (the masked keys included) — ``w/128 + 1`` blocks at a 128-aligned
    window, twice the window's own pairs at gpt-oss's 128.  Counted in pairs the op model priced
    the tables' windowed prefill 26% too fast (37% median error; 44% at 128-token windows beyond
    4k tokens).  Query block ``i`` reaches key blocks ``lo_i .. hi_i``: ``hi_i = A + i`` (``A``
    the block of the chunk's first padded row's end), the last one capped at the chunk's last
    key; ``lo_i = max(0, F + i)`` with ``F = ⌊(c − w + 1)/128⌋``, so a block computes
    ``min(A + 1 + i, A + 1 − F)`` of them.  Takes Python numbers (the pass, per chunk) or numpy
    arrays (the op model)."""
    lo, hi = (np.minimum, np.maximum) if isinstance(n, np.ndarray) or isinstance(c, np.ndarray) \
        or isinstance(w, np.ndarray) else (min, max)
    blk = ATTN_BLOCK
    nq = -(-n // blk)
    a = (c + blk - 1) // blk
    short = a + nq - 1 - (c + n - 1) // blk  # the last query block's rows past the chunk's end
    f = (c - w + 1) // blk
    j0 = lo(hi(-f, 0), nq)  # query blocks still inside the causal triangle
    return j0 * (a + 1) + 0.5 * j0 * (j0 - 1) + (nq - j0) * (a + 1 - f) - short


def packed_window_key_blocks(n, c, w, g):
    """Key blocks a windowed flash-attention kernel that packs ``g`` query heads of a KV head
    into each :data:`ATTN_BLOCK`-row query block computes for a chunk of ``n`` queries after ``c``
    cached tokens under a window of ``w`` keys, summed over the chunk's ``ceil(n·g/128)`` blocks
    (per KV head; :func:`window_key_blocks` is the unpacked count, ``g = 1``).

    A packed block holds ``r = 128/g`` consecutive tokens (FlashAttention-3 packs under a local
    window as under full causal attention: always for the variable-length calls serving makes);
    the block starting at token ``t`` reaches ``r + min(t, w − 1)`` keys, which cover
    ``(keys − 1)/128 + 1`` key blocks on average over where the span starts in a key block
    (its tokens are not aligned to the key blocks for ``g > 1``); the last block's keys end at
    the chunk's end.  Per query head it is a ``g``-th of the unpacked count at short chunks:
    the tables' windowed prefill on Hopper read 28-44% too slow at chunks of up to 64 tokens
    with a block per query head.  Takes Python numbers (the pass, per chunk) or numpy arrays."""
    blk = ATTN_BLOCK
    arrays = any(isinstance(x, np.ndarray) for x in (n, c, w, g))
    lo, hi = (np.minimum, np.maximum) if arrays else (min, max)
    r = blk / g
    nq = -((-n * g) // blk)
    k = lo(hi(-((c - w + 1) // r), 0), nq)  # blocks whose first token is within w − 1 of the start
    reach = k * c + 0.5 * r * k * (k - 1) + (nq - k) * (w - 1)  # Σ min(t, w − 1) over the blocks
    return nq * (1.0 + (r - 1.0) / blk) + (reach - (nq * r - n)) / blk


def _causal_pairs(n, c):
    """(query, key) pairs of a causal chunk of ``n`` tokens after ``c`` cached ones."""
    n = np.asarray(n, float)
    return n * np.asarray(c, float) + 0.5 * n * (n + 1)
