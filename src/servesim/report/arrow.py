"""Arrow arrays and tables built from their buffers, for the output files.

``pyarrow.array`` and ``pyarrow.table`` would do the same, but before converting anything
they ask pandas whether the input is a pandas object, and that imports pandas wherever it
is installed: about 45 MB of memory and 0.4 s of CPU for files that need nothing from
pandas.  Building each column from its numpy buffer (zero-copy for numbers) or from its
UTF-8 bytes (strings) gives the same arrays without it; ``tests/cli/test_cli_predict.py``
checks that the tables equal what ``pyarrow.table`` builds.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pyarrow as pa


def numeric_array(values: np.ndarray) -> pa.Array:
    """A numpy column (numbers or booleans, no missing values) as an Arrow array."""
    a = np.ascontiguousarray(values)
    if a.dtype.kind not in "biuf":
        raise TypeError(f"column of dtype {a.dtype}: expected numbers or booleans")
    if a.ndim != 1:
        raise ValueError(f"column of shape {a.shape}: expected one dimension")
    if not a.dtype.isnative:  # Arrow reads the buffer in the machine's byte order
        a = a.astype(a.dtype.newbyteorder("="))
    if a.dtype == np.bool_:
        return pa.Array.from_buffers(pa.bool_(), a.size, [None, pa.py_buffer(np.packbits(a, bitorder="little"))])
    return pa.Array.from_buffers(pa.from_numpy_dtype(a.dtype), a.size, [None, pa.py_buffer(a)])


def _string_offsets(lengths: np.ndarray) -> np.ndarray:
    """Each string's start in the column's bytes, then their total (int64), checked to fit the
    int32 offsets of an Arrow ``string`` array."""
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError(f"{offsets[-1]} bytes of strings in one column: more than an Arrow string array holds")
    return offsets


def string_array(values: Sequence[str | None]) -> pa.Array:
    """Strings (``None`` = missing) as an Arrow ``string`` array."""
    encoded = [b"" if s is None else s.encode() for s in values]
    n = len(encoded)
    offsets = _string_offsets(np.fromiter(map(len, encoded), dtype=np.int64, count=n))
    valid = np.fromiter((s is not None for s in values), dtype=bool, count=n)
    nulls = n - int(valid.sum())
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(encoded)),
                                       bitmap, nulls)


def coded_string_array(values: Sequence[str], codes: np.ndarray) -> pa.Array:
    """``values[codes[i]]`` for every ``i`` as an Arrow ``string`` array, gathered from the
    values' UTF-8 bytes with numpy (``Array.take`` would import ``pyarrow.compute``, about a
    tenth of a second, for one column of a few distinct strings)."""
    encoded = [v.encode() for v in values]
    lens = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    starts = np.zeros(len(encoded), dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    codes = np.asarray(codes, dtype=np.int64)
    row_lens = lens[codes]
    offsets = _string_offsets(row_lens)
    blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    # byte k of row i is blob[starts[code] + k]: each row's run of positions, shifted to its value
    gather = np.repeat(starts[codes] - offsets[:-1], row_lens) + np.arange(offsets[-1], dtype=np.int64)
    return pa.StringArray.from_buffers(codes.size, pa.py_buffer(offsets.astype(np.int32)),
                                       pa.py_buffer(blob[gather].tobytes()))


def table(columns: Mapping[str, np.ndarray | pa.Array]) -> pa.Table:
    """A table of named columns: numpy arrays are converted, Arrow arrays kept."""
    arrays = [c if isinstance(c, pa.Array) else numeric_array(c) for c in columns.values()]
    return pa.Table.from_arrays(arrays, names=list(columns))
