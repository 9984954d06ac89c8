"""Chained hashes of full KV blocks (vLLM / TensorRT-LLM prefix caching), without per-token work.

vLLM hashes each full block of ``block_size`` tokens as ``hash(parent_hash, tokens)``, so a
hash names the whole prefix up to the block's end.  The simulator has no token ids, only
trace units ``(block_id, n)`` on a coarser grid (``unit_size``, 512 for Mooncake).  The
prefix ending at token ``t`` is fully identified by the chain of unit ids up to the unit
that contains token ``t - 1`` plus the offset of ``t`` inside that unit.  So:

* per unit ``j`` a chain value ``P_j = hash((P_{j-1}, block_id_j))`` (one tuple hash per
  unit, ~24 per Mooncake prompt);
* the hash of the pool block ending at ``t`` is ``P_j + (t - j * unit_size)``.

Within a unit the hashes are an arithmetic ``range`` — produced in C, no Python loop per
block.  Same content under a different parent gives a different ``P``, hence a different
hash, exactly like vLLM's chaining.  Two different prefixes collide only if their ``P``
values lie within ``unit_size`` of each other (probability ~ units² · unit_size / 2⁶⁴).
Python's hashing of ints and tuples is not salted, so hashes are the same in every run.
"""

from __future__ import annotations

from array import array
from collections.abc import MutableSequence, Sequence

from servesim.compiled import compiled_module

#: Seed of every chain (vLLM's NONE_HASH plays this role).
ROOT_HASH = 0x5E12E51A


def unit_chain(units: Sequence[tuple[int, int]], parent: int = ROOT_HASH) -> list[int]:
    """``P_j`` for every unit: a hash naming the prefix through unit ``j``'s block id."""
    return id_chain([bid for bid, _ in units], parent)


def id_chain(block_ids: Sequence[int], parent: int = ROOT_HASH) -> list[int]:
    """:func:`unit_chain` from the units' block ids alone (a unit's length does not enter it)."""
    out: list[int] = []
    p = parent
    for bid in block_ids:
        p = hash((p, bid))
        out.append(p)
    return out


def chain_list(values: Sequence[int] = ()) -> array:
    """A request's unit chain as a *chain list*: an ``array.array`` of C 64-bit ints.

    A chain value is a Python hash, so it fits; an engine keeps each request's chain in one
    (``BlockOwner.chain``), where a Python list would hold an int object per unit, each made
    when the chain is extended, read (a cache miss) whenever a block's hash is computed, and
    freed with the request.  The compiled pool reads the values in place.
    """
    return array("q", values)


def extend_chain(chain: MutableSequence[int], block_ids: Sequence[int]) -> MutableSequence[int]:
    """Append to ``chain`` (a chain list, or a list) the chain values of the units ``block_ids``,
    continuing from its last value (:data:`ROOT_HASH` when empty); returns ``chain``."""
    chain.extend(id_chain(block_ids, chain[-1] if len(chain) else ROOT_HASH))
    return chain


def extend_chain_slice(chain: MutableSequence[int], ids: Sequence[int], start: int,
                       stop: int) -> MutableSequence[int]:
    """:func:`extend_chain` with the units ``ids[start:stop]``; compiled, a tuple's ids are
    read in place (no slice, no reference taken on each id)."""
    return extend_chain(chain, ids[start:stop])


#: The Python :func:`id_chain`, :func:`extend_chain` and :func:`extend_chain_slice`, the
#: references of ``kvcache/_hash_core.pyx``.
python_id_chain = id_chain
python_extend_chain = extend_chain
python_extend_chain_slice = extend_chain_slice

_core = compiled_module("kvcache._hash_core")  # bound at import: servesim/compiled.py's rule
if _core is not None:
    id_chain = _core.id_chain  # noqa: F811
    extend_chain = _core.extend_chain  # noqa: F811
    extend_chain_slice = _core.extend_chain_slice  # noqa: F811


def block_hashes(
    units: Sequence[tuple[int, int]],
    block_size: int,
    n_tokens: int | None = None,
    *,
    unit_size: int = 512,
    start_block: int = 0,
    chain: Sequence[int] | None = None,
) -> list[int]:
    """Hashes of the full ``block_size`` blocks among the first ``n_tokens`` of ``units``.

    ``start_block`` skips blocks already hashed (engines extend the list as decoding
    fills blocks); ``chain`` passes a cached :func:`unit_chain` of ``units`` to avoid
    recomputing it.  Units are all ``unit_size`` tokens but the last.
    """
    total = 0
    for _, n in units:
        total += n
    if n_tokens is None or n_tokens > total:
        n_tokens = total
    n_full = n_tokens // block_size
    if start_block >= n_full:
        return []
    if chain is None:
        chain = unit_chain(units)
    return chain_block_hashes(chain, block_size, n_full, unit_size=unit_size, start_block=start_block)


def chain_block_hashes(
    chain: Sequence[int], block_size: int, n_blocks: int, *, unit_size: int = 512, start_block: int = 0
) -> list[int]:
    """Hashes of pool blocks ``start_block .. n_blocks - 1`` from the unit chain alone.

    ``chain`` must reach the unit holding the last block's last token.  The hash of the
    block ending at token ``t`` is ``chain[j] - j * unit_size + t`` with ``j = (t - 1) // unit_size``.
    """
    out: list[int] = []
    if start_block >= n_blocks:
        return out
    first_end = (start_block + 1) * block_size  # end token of the first block wanted
    last_end = n_blocks * block_size
    j = (first_end - 1) // unit_size
    while True:
        u0 = j * unit_size
        u1 = u0 + unit_size
        # block ends t with u0 < t <= u1, t in [first_end, last_end], t % block_size == 0
        lo = first_end if first_end > u0 else ((u0 // block_size) + 1) * block_size
        hi = last_end if last_end < u1 else u1
        if lo <= hi:
            p = chain[j] - u0
            out.extend(range(p + lo, p + hi + 1, block_size))
        if hi >= last_end:
            return out
        j += 1


def chain_block_hash(chain: Sequence[int], block_size: int, i: int, *, unit_size: int = 512) -> int:
    """The hash of pool block ``i`` alone (:func:`chain_block_hashes`' element ``i``)."""
    t = (i + 1) * block_size
    j = (t - 1) // unit_size
    return chain[j] - j * unit_size + t


def block_content_ids(
    units: Sequence[tuple[int, int]], block_size: int, n_blocks: int, *, unit_size: int = 512, start_block: int = 0
) -> list[int]:
    """Trace block id holding the first token of each pool block (what a Belady oracle knows)."""
    return [units[(k * block_size) // unit_size][0] for k in range(start_block, n_blocks)]
