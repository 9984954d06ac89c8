"""Per-request strings (ids, session ids, reasons) in compact form.

A Python list of ten million ids takes ~650 MB (an object and a pointer each); these hold
the same strings as Arrow buffers (about 12 bytes an id) or as small integer codes into a
table of the distinct values (reasons: a handful of distinct strings).  Both read and write
like a list of strings, so the recorder's users index them as before.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from servesim.metrics.columns import Column

#: Strings per packed chunk; equal to requests.parquet's row group, so a row group is a chunk.
CHUNK = 1 << 16


def _pack(values: list):
    from servesim.report.arrow import string_array

    return string_array(values)


class StringColumn:
    """Append-only strings (or None); every full chunk of :data:`CHUNK` is packed into an
    Arrow string array.  Setting an entry of a packed chunk repacks it (rare: tests)."""

    __slots__ = ("_packed", "_tail")

    def __init__(self) -> None:
        self._packed: list = []
        self._tail: list = []

    def append(self, value: str | None) -> None:
        self._tail.append(value)
        if len(self._tail) == CHUNK:
            self._packed.append(_pack(self._tail))
            self._tail = []

    def __len__(self) -> int:
        return len(self._packed) * CHUNK + len(self._tail)

    def _locate(self, i: int) -> tuple[int, int]:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {i} out of range for {n} strings")
        return divmod(i, CHUNK)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        c, j = self._locate(int(i))
        if c < len(self._packed):
            return self._packed[c][j].as_py()
        return self._tail[j]

    def __setitem__(self, i: int, value: str | None) -> None:
        c, j = self._locate(int(i))
        if c < len(self._packed):
            chunk = self._packed[c].to_pylist()
            chunk[j] = value
            self._packed[c] = _pack(chunk)
        else:
            self._tail[j] = value

    def __iter__(self) -> Iterator[str | None]:
        for chunk in self._packed:
            yield from chunk.to_pylist()
        yield from self._tail

    def __eq__(self, other) -> bool:
        return list(self) == list(other)

    def arrow(self, start: int, stop: int):
        """Entries ``start:stop`` as one Arrow string array."""
        import pyarrow as pa

        parts = []
        for c in range(start // CHUNK, (stop - 1) // CHUNK + 1 if stop > start else start // CHUNK):
            lo, hi = max(start, c * CHUNK) - c * CHUNK, min(stop, (c + 1) * CHUNK) - c * CHUNK
            if c < len(self._packed):
                parts.append(self._packed[c].slice(lo, hi - lo))
            else:
                parts.append(_pack(self._tail[lo:hi]))
        if not parts:
            return _pack([])
        return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)


class CodedStrings:
    """Strings from a small set of distinct values, stored as int32 codes in a
    :class:`Column` (which can spill like the recorder's numeric columns)."""

    __slots__ = ("codes", "values", "_index", "_n")

    def __init__(self) -> None:
        self.codes = Column(np.int32, 0)
        self.values: list[str] = [""]
        self._index = {"": 0}
        self._n = 0

    def _code(self, value: str) -> int:
        code = self._index.get(value)
        if code is None:
            code = self._index[value] = len(self.values)
            self.values.append(value)
        return code

    def append(self, value: str) -> None:
        self.codes.ensure(self._n + 1)
        self.codes.data[self._n] = self._code(value)
        self._n += 1

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.values[c] for c in self.codes.data[: self._n][i].tolist()]
        i = int(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"index {i} out of range for {self._n} strings")
        return self.values[self.codes.data[i]]

    def __setitem__(self, i: int, value: str) -> None:
        i = int(i)
        if not 0 <= i < self._n:
            raise IndexError(f"index {i} out of range for {self._n} strings")
        self.codes.data[i] = self._code(value)

    def __iter__(self) -> Iterator[str]:
        return iter(self[:])

    def __eq__(self, other) -> bool:
        return self[:] == list(other)

    def counts(self, rows: np.ndarray) -> dict[str, int]:
        """How often each value occurs at the indices ``rows``."""
        found = np.bincount(self.codes.data[rows], minlength=len(self.values))
        return {self.values[c]: int(n) for c, n in enumerate(found.tolist()) if n}

    def arrow(self, start: int, stop: int):
        """Entries ``start:stop`` as one Arrow string array."""
        from servesim.report.arrow import coded_string_array

        return coded_string_array(self.values, self.codes.data[start:stop])
