"""The prefixes earlier requests sent, as the plays table's ideal cache counts them.

:func:`servesim.metrics.plays.ideal_cached_tokens` keys every prefix of a request's blocks by
a 64-bit rolling hash (:class:`PrefixKeys`); a request reuses its longest prefix (up to a
limit) whose key an earlier request sent, found by bisection, and then adds its own keys.  On
an AgentX trace the keys run to millions: kept as Python ints in a set, their conversion and
insertion were most of the plays table's time.  :class:`SeenPrefixes` here is the reference;
``metrics/_prefix_seen_core.pyx`` compiles it over an open-addressing table of uint64 keys,
and keys each request's block ids straight from its tuples, one at a time, where the
reference converts and keys them in chunks of numpy arrays
(``tests/metrics/test_prefix_seen_core.py`` compares the two); :func:`new_seen_prefixes`
picks one.
"""

from __future__ import annotations

import numpy as np

from servesim.compiled import compiled_module


#: Rolling-hash multiplier (odd, so invertible modulo 2**64) and its inverse.
_P = np.uint64(0x9E3779B97F4A7C15)
_Q = np.uint64(pow(0x9E3779B97F4A7C15, -1, 1 << 64))


class PrefixKeys:
    """A 64-bit key per block for the prefix ending at it: ``h[k] = sum_j id[j] * P**(k-j)``
    (mod 2**64), computed for all k at once as ``P**k * cumsum(id[j] * Q**j)``.

    The powers of ``P`` and ``Q`` are the same for every request: they are computed once, for
    the longest sequence, and sliced.  :meth:`many` computes the keys of many sequences in a
    few array operations over their concatenation (a few small numpy calls per request were
    most of the plays table's time on an AgentX trace); the sums are modulo 2**64, so a
    sequence's cumulative sum is the concatenation's minus its value before the sequence."""

    def __init__(self, longest: int) -> None:
        n = max(longest, 1)
        with np.errstate(over="ignore"):
            self.qpow = np.cumprod(np.full(n, _Q, dtype=np.uint64)) * _P  # Q**j
            self.ppow = np.cumprod(np.full(n, _P, dtype=np.uint64)) * _Q  # P**k

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        n = ids.size
        with np.errstate(over="ignore"):
            return np.cumsum((ids + np.uint64(1)) * self.qpow[:n], dtype=np.uint64) * self.ppow[:n]

    def many(self, seqs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The keys of each sequence (none empty), concatenated, and where each one's start."""
        sizes = np.fromiter((a.size for a in seqs), dtype=np.int64, count=len(seqs))
        starts = np.zeros(len(seqs), dtype=np.int64)
        np.cumsum(sizes[:-1], out=starts[1:])
        local = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(starts, sizes)  # position in its sequence
        with np.errstate(over="ignore"):
            total = np.cumsum((np.concatenate(seqs) + np.uint64(1)) * self.qpow[local], dtype=np.uint64)
            before = np.zeros(len(seqs), dtype=np.uint64)
            before[1:] = total[starts[1:] - 1]
            return (total - np.repeat(before, sizes)) * self.ppow[local], starts


#: Block ids whose prefix keys :meth:`SeenPrefixes.match_sequences` computes together: enough to
#: make the per-chunk numpy calls negligible, few enough that the chunk's temporaries (about ten
#: arrays of 8 bytes an id) stay well below the seen set.
_KEYS_CHUNK = 1 << 17


class SeenPrefixes:
    """The set of prefix keys sent so far."""

    def __init__(self) -> None:
        self._seen: set[int] = set()

    def match_sequences(self, prompts: list[tuple], answers: list[tuple], offsets: np.ndarray,
                        limits: np.ndarray) -> np.ndarray:
        """For each request in order, its sequence the block ids of ``prompts[i] + answers[i]``
        (ints in [0, 2**64), none both empty) plus ``offsets[i]`` (uint64, modulo 2**64): the
        blocks it matches (:meth:`match_chunk`, ``limits[i]`` at most), its keys then seen.
        int64 array."""
        keys_of = PrefixKeys(max(len(p) + len(a) for p, a in zip(prompts, answers)))
        out = np.zeros(len(prompts), dtype=np.int64)
        seqs: list[np.ndarray] = []
        first = held = 0
        for i, (prompt, answer) in enumerate(zip(prompts, answers)):
            with np.errstate(over="ignore"):
                seqs.append(np.asarray(prompt + answer, dtype=np.uint64) + offsets[i])
            held += seqs[-1].size
            if held >= _KEYS_CHUNK or i == len(prompts) - 1:
                keys, starts = keys_of.many(seqs)
                sizes = np.fromiter((a.size for a in seqs), dtype=np.int64, count=len(seqs))
                out[first:i + 1] = self.match_chunk(keys, starts, sizes, limits[first:i + 1])
                seqs, first, held = [], i + 1, 0
        return out

    def match_chunk(self, keys: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
                    limits: np.ndarray) -> np.ndarray:
        """For each sequence in order (its keys ``keys[start:start + size]``, uint64): the
        largest ``k <= limit`` whose key ``k - 1`` was seen, by bisection (a seen prefix's own
        prefixes were seen with it); then its keys from ``k`` on are seen too.  int64 array."""
        out = np.zeros(len(starts), dtype=np.int64)
        seen = self._seen
        for i, (start, size, limit) in enumerate(zip(starts.tolist(), sizes.tolist(), limits.tolist())):
            mine = keys[start:start + size]
            lo, hi = 0, limit
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if int(mine[mid - 1]) in seen:
                    lo = mid
                else:
                    hi = mid - 1
            out[i] = lo
            seen.update(mine[lo:].tolist())  # the matched prefixes are there already
        return out


def new_seen_prefixes() -> SeenPrefixes:
    """The compiled set where built (``SERVESIM_PURE_PYTHON`` unset), else the reference."""
    return _core.SeenPrefixes() if _core is not None else SeenPrefixes()


_core = compiled_module("metrics._prefix_seen_core")  # bound at import: servesim/compiled.py's rule
