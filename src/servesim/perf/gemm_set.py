"""The GEMMs one group of layers runs per token row, priced together and kept per row count.

Apart from the op model (:mod:`servesim.perf.kernels`), which prices each GEMM: the step-time
pass asks for the same few row counts again and again, so a set computes 512 consecutive row
counts in one vectorised call and answers later asks by lookup.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from servesim.perf.kernels import OpModel


class GemmSet:
    """The GEMMs one group of layers runs per token row, priced together at ``m`` rows.

    ``entries``: (count, n, k, weight dtype) per GEMM shape — ``count`` layers run it.  The
    sum over entries is computed for 512 consecutive ``m`` at a time (vectorised) and kept,
    so a pass pays a list lookup; beyond :attr:`MAX_ROWS` it is computed for that ``m``.
    """

    BLOCK = 512
    MAX_ROWS = 1 << 16

    def __init__(self, ops: OpModel, entries: list[tuple[float, float, float, str]]) -> None:
        self.ops = ops
        self.entries = [e for e in entries if e[0] > 0 and e[1] > 0 and e[2] > 0]
        self._blocks: dict[int, list[float]] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def _compute(self, m) -> np.ndarray:
        """Σ count × gemm(m, n, k) for a vector of ``m``: the GEMMs of one weight precision in
        one broadcast call (rows: GEMMs, columns: ``m``)."""
        m = np.maximum(np.atleast_1d(np.asarray(m, dtype=np.float64)), 1.0)  # row 0: never priced
        out = np.zeros(m.shape)
        for dtype in dict.fromkeys(e[3] for e in self.entries):
            sel = [e for e in self.entries if e[3] == dtype]
            count = np.array([e[0] for e in sel], dtype=np.float64)[:, None]
            n = np.array([e[1] for e in sel], dtype=np.float64)[:, None]
            k = np.array([e[2] for e in sel], dtype=np.float64)[:, None]
            out = out + (count * self.ops.gemm(m[None, :], n, k, dtype)).sum(axis=0)
        return out

    def time(self, rows: float) -> float:
        """Seconds of all entries at ``rows`` token rows (fractional rows round up: a
        partly used row still fills a tile)."""
        if rows <= 0 or not self.entries:
            return 0.0
        m = int(math.ceil(rows))
        if m >= self.MAX_ROWS:
            return float(self._compute(m)[0])
        b, i = divmod(m, self.BLOCK)
        blk = self._blocks.get(b)
        if blk is None:
            blk = self._blocks[b] = self._compute(np.arange(b * self.BLOCK, (b + 1) * self.BLOCK)).tolist()
        return blk[i]
