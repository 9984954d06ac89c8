"""Reading JSON-lines traces (plain or gzip) row by row, with errors that name file, line and field.

Shared by every agentic reader: :func:`json_rows` yields ``(Row, obj)`` for each non-blank
line; :class:`Row` reads typed fields and words the error when one is wrong.  A reader that
takes ``hash_ids`` as an array (``ids_as_array``) gets long ones parsed from the line's text
straight into an array (:func:`_decode_with_id_array`): an AgentX trace lists millions of ids,
and an int object made and freed for each was most of decoding it.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from pathlib import Path
from typing import Any, Iterator

import msgspec

import numpy as np

from servesim.errors import WorkloadError
from servesim.workload.request import MAX_TOKENS

from .trace_ids import cut_id_list, ids_valid

_MISSING = object()
#: Decodes a line about twice as fast as ``json.loads`` (long ``hash_ids`` lists).
_decode = msgspec.json.Decoder().decode
#: Lists shorter than this (characters) are decoded as JSON: the array path would not pay.
_ARRAY_MIN_CHARS = 256


def open_text(path: Path):
    """The file as text; a name ending in ``.gz`` is read through gzip."""
    if not path.exists():
        raise WorkloadError(f"{path}: trace file not found")
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig")
    return open(path, "r", encoding="utf-8-sig")


def json_rows(path: Path, ids_as_array: bool = False) -> Iterator["Row"]:
    """One :class:`Row` per non-blank line; invalid JSON or a non-object line is an error.

    ``ids_as_array``: a row's ``hash_ids`` may come as a uint64 array (already checked) instead
    of a list; :meth:`Row.ids` returns either."""
    line_no = 0
    fast = _decode_with_id_array if ids_as_array else None
    try:
        with open_text(path) as fh:
            for line in fh:
                line_no += 1
                if not line or line.isspace():  # a blank line (strip would copy every line)
                    continue
                obj = None
                if fast is not None:
                    try:
                        obj = fast(line)
                    except msgspec.DecodeError:  # the plain decode below words the error
                        obj = None
                try:
                    if obj is None:
                        obj = _decode(line)
                except msgspec.DecodeError:
                    try:  # the standard decoder words the error with its column
                        json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise WorkloadError(f"{path}:{line_no}: invalid JSON: {exc.msg} (column {exc.colno})") from None
                    raise WorkloadError(f"{path}:{line_no}: invalid JSON") from None
                if not isinstance(obj, dict):
                    raise WorkloadError(f"{path}:{line_no}: expected a JSON object, got {_show(obj)}")
                yield Row(path, line_no, obj)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise WorkloadError(f"{path}: not a complete gzip file ({exc})") from None
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{path}:{line_no + 1}: not UTF-8 text ({exc.reason})") from None


def _decode_with_id_array(line: str) -> dict | None:
    """The line's object with a long ``hash_ids`` as a uint64 array; None where that does not
    apply (no such list, a short one, anything but plain non-negative integers, the key written
    twice): the caller then decodes the line as JSON.

    The list's text is cut out of the line and the rest decoded (:func:`cut_id_list`); the
    placeholder put in its place must come back as ``hash_ids``, which proves the cut was that
    field's value."""
    cut = cut_id_list(line, _ARRAY_MIN_CHARS)
    if cut is None:
        return None
    obj = _decode(cut[0])
    if type(obj) is not dict or type(obj.get("hash_ids")) is not int:
        return None
    obj["hash_ids"] = cut[1]
    return obj


def plain_number(v: Any) -> float | None:
    """``v`` as a float where it is a finite number >= 0 (an int or a float, not a bool; an
    integer beyond any float is not), else None: the rule of :meth:`Row.number`, and of the
    readers' shortcuts for rows written plainly (``formats._plain_v2_row``)."""
    if isinstance(v, float):
        return float(v) if 0.0 <= v < math.inf else None  # NaN compares false
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        try:
            return float(v)
        except OverflowError:
            return None
    return None


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Row:
    """One JSON object of a trace and where it is (``file:line``, plus a key prefix for nested objects)."""

    __slots__ = ("path", "line", "obj", "prefix")

    def __init__(self, path: Path, line: int, obj: dict, prefix: str = "") -> None:
        self.path = path
        self.line = line
        self.obj = obj
        self.prefix = prefix

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    def at(self, field: str) -> str:
        """``file:line: field 'x'`` for a message."""
        return f"{self.where}: field '{self.prefix}{field}'"

    def fail(self, field: str, expected: str, value: Any = _MISSING) -> WorkloadError:
        got = "missing" if value is _MISSING else f"got {_show(value)}"
        return WorkloadError(f"{self.at(field)}: expected {expected}, {got}")

    def child(self, obj: Any, prefix: str) -> "Row":
        if not isinstance(obj, dict):
            raise self.fail(prefix.rstrip("."), "a JSON object", obj)
        return Row(self.path, self.line, obj, self.prefix + prefix)

    def has(self, field: str) -> bool:
        return self.obj.get(field) is not None

    def string(self, field: str, default: str | None | object = _MISSING) -> str | None:
        v = self.obj.get(field)
        if v is None:
            if default is _MISSING:
                raise self.fail(field, "a string")
            return default  # type: ignore[return-value]
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            raise self.fail(field, "a string", v)
        s = str(v)
        if not s.strip():
            raise self.fail(field, "a non-empty string", v)
        return s

    def integer(self, field: str, minimum: int = 0, default: int | None | object = _MISSING) -> int | None:
        v = self.obj.get(field)
        if v is None:
            if default is _MISSING:
                raise self.fail(field, f"an integer >= {minimum}")
            return default  # type: ignore[return-value]
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum or v > MAX_TOKENS:
            raise self.fail(field, f"an integer in [{minimum}, {MAX_TOKENS}]", v)
        return v

    def number(self, field: str, default: float | None | object = _MISSING) -> float | None:
        """A finite number >= 0."""
        v = self.obj.get(field)
        if v is None:
            if default is _MISSING:
                raise self.fail(field, "a number >= 0")
            return default  # type: ignore[return-value]
        f = plain_number(v)
        if f is None:
            raise self.fail(field, "a finite number >= 0", v)
        return f

    def ids(self, field: str, required: bool = True) -> list[int] | np.ndarray | None:
        """A list of block ids (integers >= 0), or their uint64 array where ``json_rows`` made one."""
        v = self.obj.get(field)
        if v is None:
            if required:
                raise self.fail(field, "a list of integers >= 0")
            return None
        if type(v) is np.ndarray:  # parsed and checked by _decode_with_id_array
            return v
        if not isinstance(v, list):
            raise self.fail(field, "a list of integers >= 0", v)
        if ids_valid(v):  # one C loop when compiled (trace_ids.py)
            return v
        for k, x in enumerate(v):
            if isinstance(x, bool) or not isinstance(x, int) or x < 0 or x >= 1 << 64:
                raise self.fail(f"{field}[{k}]", "an integer from 0 to 2**64 - 1", x)
        return v

    def items(self, field: str) -> list:
        v = self.obj.get(field)
        if v is None:
            return []
        if not isinstance(v, list):
            raise self.fail(field, "a list", v)
        return v

    def choice(self, field: str, allowed: tuple[str, ...], default: str) -> str:
        v = self.obj.get(field)
        if v is None:
            return default
        if v not in allowed:
            raise self.fail(field, "one of " + ", ".join(repr(a) for a in allowed), v)
        return v

    def forbid(self, fields: tuple[str, ...], this: str, other: str) -> None:
        """A key of another format on this row: the file mixes formats."""
        for f in fields:
            if f in self.obj:
                raise WorkloadError(f"{self.at(f)}: this key belongs to the {other} format, but the trace is "
                                    f"read as {this}; a file must hold one format")
