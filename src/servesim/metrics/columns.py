"""Growable numpy columns indexed by a request's dense index.

Traces are read streaming, so the number of requests is not known up front; columns
double their capacity as indices grow, keeping appends amortised O(1) and storage
columnar (one array per field, never one object per token).

Past a million requests a column moves to a spill file (:meth:`Column.spill`): a memory map
of an anonymous temporary file (deleted by the system when the process ends, however it
ends), sized for every request a run may hold but sparse, so only what is written takes
disk.  The recorder then drops the pages of old requests from memory every so often
(:meth:`Column.release`); a later read of them faults them back from the page cache.
Resident memory stays bounded by the requests near the end of the column, not by their
number, and the values are the same bits either way.
"""

from __future__ import annotations

import mmap
import tempfile

import numpy as np

#: Requests one run may hold.  The recorder keeps about 150 bytes of columns per request
#: (docs/performance.md, "Memory"): 100 M requests is ~15 GB; a larger study is several runs
#: (trace windows, or one run per seed).  config/limits.py checks a workload against it up front.
MAX_REQUESTS = 100_000_000

#: Indices filled with the column's fill value at a time once spilled (the file is sparse:
#: a never-written page reads as zeros, which is not every column's fill).
FILL_STEP = 1 << 16


class Column:
    """A numpy array that grows to fit any index written to it."""

    __slots__ = ("data", "fill", "ready", "_file")

    def __init__(self, dtype, fill, capacity: int = 1024) -> None:
        self.fill = fill
        self.data = np.full(capacity, fill, dtype=dtype)
        #: Indices ``< ready`` hold a value or the fill.
        self.ready = capacity
        self._file = None

    def ensure(self, size: int) -> None:
        """Make indices ``< size`` valid."""
        if size <= self.ready:
            return
        if self._file is not None:  # spilled: fill the next stretch of the map in place
            stop = min(self.data.size, max(size, self.ready + FILL_STEP))
            if stop < size:
                raise MemoryError(f"column of {self.data.size:,} entries cannot hold index {size - 1:,}")
            if self.fill != 0:
                self.data[self.ready:stop] = self.fill
            self.ready = stop
            return
        cap = self.data.size
        new_cap = max(size, cap * 2)
        grown = np.full(new_cap, self.fill, dtype=self.data.dtype)
        grown[:cap] = self.data
        self.data = grown
        self.ready = new_cap

    @property
    def spilled(self) -> bool:
        return self._file is not None

    def spill(self, capacity: int, used: int) -> None:
        """Move the column to a memory-mapped temporary file of ``capacity`` entries, the
        first ``used`` copied over."""
        if self._file is not None:
            return
        itemsize = self.data.dtype.itemsize
        fh = tempfile.TemporaryFile(prefix="servesim-column-")
        fh.truncate(capacity * itemsize)
        mapped = np.memmap(fh, dtype=self.data.dtype, mode="r+", shape=(capacity,))
        kept = min(used, self.ready)
        mapped[:kept] = self.data[:kept]
        self.data = mapped
        self._file = fh
        self.ready = kept
        self.ensure(used + 1)

    def release(self, stop: int) -> None:
        """Drop the resident pages holding indices ``< stop`` (spilled columns only); their
        values stay in the file and come back on the next read."""
        if self._file is None:
            return
        m = getattr(self.data, "_mmap", None)
        nbytes = (stop * self.data.dtype.itemsize) // mmap.PAGESIZE * mmap.PAGESIZE
        if m is not None and nbytes > 0 and hasattr(m, "madvise"):
            m.madvise(mmap.MADV_DONTNEED, 0, nbytes)
