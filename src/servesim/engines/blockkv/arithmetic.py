"""Block arithmetic shared by the block-pool engines (vLLM, TensorRT-LLM).

:func:`decode_arithmetic` gives the engines the functions they call once or more per pass:
the compiled ``_decode_core`` when built (and not switched off), else this module's numpy
versions, which are the reference.
"""

from __future__ import annotations

import sys
from types import ModuleType

import numpy as np

from servesim.compiled import compiled_module

#: ``left_min`` of an empty decode prefix: larger than any remaining output.
NO_LIMIT = 1 << 62


def stretch_within_free_blocks(computed: np.ndarray, block_size: int, free_blocks: int, limit: int) -> int:
    """Longest decode stretch, at most ``limit`` passes, whose new blocks fit in ``free_blocks``.

    ``computed[j]`` is request ``j``'s KV length before the stretch.  Passes 1..k-1 after the
    first (whose blocks are already allocated) open ``floor((c+k-1)/bs) - floor(c/bs)`` blocks
    per request; that count grows with ``k``, so a binary search finds the largest ``k``
    (after one check of ``limit`` itself, which usually fits).
    """
    if limit <= 1:
        return 1
    base = computed // block_size

    def fits(k: int) -> bool:
        return int(((computed + k - 1) // block_size - base).sum()) <= free_blocks

    if fits(limit):  # the common case: the free pool covers the whole stretch
        return limit
    lo, hi = 1, limit - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def passes_to_block_event(computed: np.ndarray, block_size: int, caching: bool) -> int:
    """Passes of a decode stretch until the first block event of any of its requests (>= 1).

    ``computed[j]`` is request ``j``'s KV length at the stretch's first pass: pass ``s``
    opens a block for it at ``s = (-(c+1)) % bs + 1`` and, with prefix caching, fills one
    at ``s = (-(c+2)) % bs + 1`` (:func:`stretch_block_events`' events, shifted by one).
    vLLM's decode fast path bounds a stretch by this while a waiting request is blocked
    (``engines/vllm/fast_path.py:decode_stretch_limit``); ``computed`` must not be empty.
    """
    m = (-(computed + 1)) % block_size + 1
    if caching:
        m = np.minimum(m, (-(computed + 2)) % block_size + 1)
    return int(m.min())


def stretch_block_events(computed: list[int], k: int, block_size: int, caching: bool) -> list[int]:
    """The block events of a decode stretch of ``k`` passes, in the order they happen.

    Pass ``s`` (1..k-1) computes position ``computed[j] + s`` of request ``j``; at its start
    it allocates a block when that position opens one (``s ≡ -computed (mod bs)``) and, with
    prefix caching, registers a block when the position fills one (``s ≡ -(computed+1)``).
    Returns the distinct events as keys ``s * n + j`` (``n = len(computed)``), sorted: by
    step, then request — the order in which a pass-by-pass simulation meets them.  Each
    request's events are two arithmetic ranges, produced in C; a short stretch (the common
    case, cut by the next arrival) costs a couple of operations per request.
    """
    bs = block_size
    n = len(computed)
    stop = k * n
    stride = bs * n
    keys: list[int] = []
    for j, c in enumerate(computed):
        a = (-c) % bs or bs  # first step that opens a block
        if a < k:
            keys.extend(range(a * n + j, stop, stride))
        if caching:
            f = a - 1 if a > 1 else bs  # first step that fills one
            if f < k and f != a:
                keys.extend(range(f * n + j, stop, stride))
    keys.sort()
    return keys


def decode_event_buckets(computed: list[int], first: int, k: int, block_size: int,
                         caching: bool) -> list[list[tuple[int, int]]]:
    """The block events of decode passes ``first..k-1``, grouped by pass number modulo ``block_size``.

    Pass ``s`` computes position ``computed[j] + s`` of request ``j``: it opens a block
    (kind 0) when ``s ≡ -computed[j]`` and, with prefix caching, fills one (kind 1) when
    ``s ≡ -computed[j] - 1 (mod block_size)``.  So the events of pass ``s`` are
    ``buckets[s % block_size]``, by request, an open before a fill (block size 1) — walking
    ``s = first..k-1`` over the buckets meets them in the order of a pass-by-pass
    simulation, with no sort and no per-event key arithmetic (the vLLM replay's hot loop).
    Requests without an event in the range are left out.
    """
    bs = block_size
    buckets: list[list[tuple[int, int]]] = [[] for _ in range(bs)]
    for j, c in enumerate(computed):
        a = -c % bs  # residue of the passes that open a block
        if first + (a - first) % bs < k:
            buckets[a].append((j, 0))
        if caching:
            f = (a - 1) % bs  # ... and of those that fill one
            if first + (f - first) % bs < k:
                buckets[f].append((j, 1))
    return buckets


# -- the vLLM model's decode prefix (engines/vllm/fast_path.py:_DecodePrefix): rows of (computed
# tokens, remaining output, recorder row), one column per request -------------------------
_STEP = np.array([[1], [-1], [0]], dtype=np.int64)


def left_min(rows: np.ndarray) -> int:
    """The fewest remaining output tokens in ``rows`` (:data:`NO_LIMIT` if empty)."""
    return int(rows[1].min()) if rows.shape[1] else NO_LIMIT


def advance_rows(rows: np.ndarray, k: int, left_min_: int, reqs: list) -> tuple[np.ndarray, int, list]:
    """The rows after ``k`` decode passes, less the requests that finished.

    Returns ``(rows, left_min, kept)``: ``kept`` the requests of ``reqs`` (one per column)
    that remain, ``reqs`` itself when all do (``left_min_ > k``).
    """
    if len(reqs) != rows.shape[1]:
        raise ValueError(f"{len(reqs)} requests for {rows.shape[1]} columns")
    out = rows + (_STEP if k == 1 else _STEP * k)
    if left_min_ > k:
        return out, left_min_ - k, reqs
    keep = out[1] > 0
    out = out[:, keep]
    return out, left_min(out), [reqs[j] for j in np.flatnonzero(keep).tolist()]


def decode_due(computed: np.ndarray, bs: int, caching: bool) -> tuple[np.ndarray, list[int], list[int], int]:
    """A decode pass of requests at ``computed`` tokens: ``(ctx, due, due_computed, opens)``.

    ``ctx = computed + 1``; ``due``: the positions whose pass opens a block
    (``ctx % bs == 1 % bs``) or, with prefix caching, fills one (``ctx % bs == 0``), in order;
    ``due_computed``: their computed tokens; ``opens``: how many open a block.
    """
    ctx = computed + 1
    r = ctx % bs
    opening = r == 1 % bs
    due = (r <= 1 if caching else opening).nonzero()[0]
    return ctx, due.tolist(), computed[due].tolist(), int(np.count_nonzero(opening))


def finishing(rows: np.ndarray, k: int) -> list[int]:
    """The positions of the prefix's requests with at most ``k`` output tokens left (they
    finish within ``k`` passes), in order."""
    return np.flatnonzero(rows[1] <= k).tolist()


def prefix_rows(computed: list[int], left: list[int], idx: list[int]) -> np.ndarray:
    """A decode prefix's ``(3, n)`` rows from its three columns as lists."""
    return np.array([computed, left, idx], dtype=np.int64).reshape(3, len(computed))


def extend_rows(rows: np.ndarray, computed: list[int], left: list[int], idx: list[int]) -> np.ndarray:
    """The rows followed by the columns of more requests (given as lists, as :func:`prefix_rows`)."""
    return np.concatenate((rows, prefix_rows(computed, left, idx)), axis=1)


def int64_array(values: list[int]) -> np.ndarray:
    """``values`` as an int64 array (a pass's prefill columns)."""
    return np.array(values, dtype=np.int64)


def minus_one(values: np.ndarray) -> np.ndarray:
    """``values - 1`` as a new int64 array (a decode pass's contexts to its computed tokens;
    numpy's operator costs microseconds on the Python int alone)."""
    return values - 1


def index_with(first: np.ndarray | None, more: list[int]) -> np.ndarray:
    """The int64 array ``first`` (or nothing) followed by ``more`` (a pass's recorder rows: the
    leading decodes', then the requests that sampled a token after them)."""
    more_arr = np.array(more, dtype=np.int64)
    return more_arr if first is None else np.concatenate((first, more_arr))


def batch_arrays(pre_rows: np.ndarray | None, pre_ctx: np.ndarray | None, idx: list[int], ctx: list[int],
                 lefts: list[int], lead: int,
                 want_rows: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A vLLM pass's recorder rows and decode contexts, and the rows of its ``lead`` leading
    decodes if ``want_rows`` (``engines/vllm.py:VLLMEngine._batch_arrays``).

    ``pre_rows`` / ``pre_ctx``: the known leading decodes' rows and contexts (or None), ahead
    of the pass's other requests (recorder rows ``idx``) and other decodes (contexts ``ctx``,
    remaining output ``lefts``).
    """
    all_idx = np.array(idx, dtype=np.int64)
    dctx = np.array(ctx, dtype=np.int64)
    left = np.array(lefts, dtype=np.int64)
    if pre_rows is not None:
        all_idx = np.concatenate((pre_rows[2], all_idx))
        dctx = np.concatenate((pre_ctx, dctx))
        left = np.concatenate((pre_rows[1], left))
    rows = np.stack((dctx[:lead] - 1, left[:lead], all_idx[:lead])) if want_rows else None
    return all_idx, dctx, rows


def decode_arithmetic() -> ModuleType:
    """The compiled decode arithmetic, or this module (the numpy reference)."""
    return _core if _core is not None else sys.modules[__name__]


#: The compiled decode arithmetic, or None (bound at import: servesim/compiled.py's rule).
_core = compiled_module("engines._decode_core")
