"""The prefixes earlier requests sent, as the plays table's ideal cache counts them.

:func:`servesim.metrics.plays.ideal_cached_tokens` keys every prefix of a request's blocks by
a 64-bit rolling hash; a request reuses its longest prefix (up to a limit) whose key an
earlier request sent, found by bisection, and then adds its own keys.  On an AgentX trace the
keys run to millions: kept as Python ints in a set, their conversion and insertion were
most of the plays table's time.  :class:`SeenPrefixes` here is the reference;
``metrics/_prefix_seen_core.pyx`` compiles it over an open-addressing table of uint64 keys
(``tests/metrics/test_prefix_seen_core.py`` compares the two); :func:`new_seen_prefixes`
picks one.
"""

from __future__ import annotations

import numpy as np

from servesim.compiled import compiled_module


class SeenPrefixes:
    """The set of prefix keys sent so far."""

    def __init__(self) -> None:
        self._seen: set[int] = set()

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
