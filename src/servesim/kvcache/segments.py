"""Token ranges of trace blocks: the key alphabet of the radix cache.

:func:`servesim.workload.request.sequence_units` describes a sequence as units
``(block_id, n_tokens)``: consecutive blocks of the trace's block grid, all full but the
last.  A radix node may start or end anywhere inside a block, so the tree stores
*segments* ``(block_id, start, end)``: tokens ``[start, end)`` of block ``block_id``.  Two
segments with the same id and start share their leading ``min(end) - start`` tokens, so
all comparisons are per segment, never per token.
"""

from __future__ import annotations

from collections.abc import Sequence

from servesim.compiled import compiled_module
from servesim.kvcache.events import Segment


def units_to_segments(units: Sequence[tuple[int, int]], n_tokens: int | None = None) -> list[Segment]:
    """Segments covering the first ``n_tokens`` (default: all) tokens of ``units``."""
    segs: list[Segment] = []
    left = n_tokens if n_tokens is not None else None
    for bid, n in units:
        if left is not None:
            if left <= 0:
                break
            if n > left:
                n = left
            left -= n
        if n > 0:
            segs.append((bid, 0, n))
    return segs


def segments_tokens(segs: Sequence[Segment]) -> int:
    """Number of tokens the segments cover."""
    return sum(e - s for _, s, e in segs)


def split_segments(segs: list[Segment], m: int) -> tuple[list[Segment], list[Segment]]:
    """Split a segment list after its first ``m`` tokens (0 < m < total)."""
    acc = 0
    for idx, (bid, s, e) in enumerate(segs):
        n = e - s
        if acc + n == m:
            return segs[: idx + 1], segs[idx + 1 :]
        if acc + n > m:
            cut = s + (m - acc)
            return segs[:idx] + [(bid, s, cut)], [(bid, cut, e)] + segs[idx + 1 :]
        acc += n
    raise ValueError(f"cannot split {segs} after {m} tokens")


def common_prefix(key: Sequence[Segment], segs: Sequence[Segment], i: int, s: int) -> tuple[int, int, int]:
    """Tokens shared by ``key`` and the input ``segs`` read from segment ``i``, token ``s``.

    Returns ``(matched, i, s)`` with the input position after the shared tokens.
    """
    m = 0
    n = len(segs)
    for kb, ks, ke in key:
        if i >= n:
            break
        bid, _, e = segs[i]
        if kb != bid or ks != s:
            break
        end = ke if ke < e else e
        m += end - s
        if end == e:
            i += 1
            s = 0
            if end < ke:  # the input ends inside this key segment
                break
        else:
            s = end
    return m, i, s


def advance(segs: Sequence[Segment], i: int, s: int, t: int) -> tuple[int, int]:
    """Input position ``t`` tokens after segment ``i``, token ``s``."""
    while t > 0:
        e = segs[i][2]
        room = e - s
        if t < room:
            return i, s + t
        t -= room
        i += 1
        s = 0
    return i, s


def canonical_segments(segs: Sequence[Segment]) -> list[Segment]:
    """Merge runs of one block split over several segments: ``(b, 0, 100), (b, 100, 512)`` → ``(b, 0, 512)``.

    The radix tree reads an input sequence as units starting at token 0 of each block; a
    path read back from the tree (node keys root to leaf) is turned into that form here.
    """
    out: list[Segment] = []
    for bid, s, e in segs:
        if out and out[-1][0] == bid and out[-1][2] == s:
            out[-1] = (bid, out[-1][1], e)
        else:
            out.append((bid, s, e))
    return out


#: The Python versions of the functions ``kvcache/_segments_core.pyx`` compiles: the
#: reference its test compares against.
PYTHON_VERSIONS = {f.__name__: f for f in (units_to_segments, segments_tokens, common_prefix, advance)}

_core = compiled_module("kvcache._segments_core")  # bound at import: servesim/compiled.py's rule
if _core is not None:
    units_to_segments = _core.units_to_segments  # noqa: F811
    segments_tokens = _core.segments_tokens  # noqa: F811
    common_prefix = _core.common_prefix  # noqa: F811
    advance = _core.advance  # noqa: F811
