"""Growable numpy columns indexed by a request's dense index.

Traces are read streaming, so the number of requests is not known up front; columns
double their capacity as indices grow, keeping appends amortised O(1) and storage
columnar (one array per field, never one object per token).
"""

from __future__ import annotations

import numpy as np


class Column:
    """A numpy array that grows to fit any index written to it."""

    __slots__ = ("data", "fill")

    def __init__(self, dtype, fill, capacity: int = 1024) -> None:
        self.fill = fill
        self.data = np.full(capacity, fill, dtype=dtype)

    def ensure(self, size: int) -> None:
        """Make indices ``< size`` valid."""
        cap = self.data.size
        if size <= cap:
            return
        new_cap = max(size, cap * 2)
        grown = np.full(new_cap, self.fill, dtype=self.data.dtype)
        grown[:cap] = self.data
        self.data = grown
