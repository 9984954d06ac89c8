"""Streaming reader of Mooncake-format JSONL request traces.

One JSON object per line.  Blank lines are skipped and counted (``counts["blank_lines"]``;
the run's summary warns about them).

- ``timestamp``: arrival in ms from the trace start (number >= 0).  Rows that are not
  later turns of a session must come in non-decreasing timestamp order.
- ``input_length`` (integer > 0) and ``output_length`` (integer >= 1): tokens.
- ``hash_ids`` (optional): one integer >= 0 per ``block_size``-token block of the prompt,
  exactly ``ceil(input_length / block_size)`` of them.  Without it the prompt gets ids of
  its own (negative, so they never meet trace ids or generated-token ids).
- ``session_id`` (optional, string or integer) and ``delay`` (ms >= 0): the first row of a
  session arrives at its timestamp; every later row of the same session arrives ``delay``
  ms after the previous turn finished, so ``delay`` is required there and its
  ``timestamp`` (optional) is ignored.
- ``request_id`` (optional, string or integer); otherwise ``L<line number>``.  Ids must be
  unique: a repeated one is an error naming both lines.  (Checking keeps one entry per id
  of a trace that writes ids; traces without ids need none, their ids are unique by
  construction.)

Other keys are ignored.  Integer fields accept integral JSON numbers such as ``12.0``
(some writers emit them) but reject ``12.5`` and booleans.

The reader is a generator over the open file: it holds one line at a time plus, for
session traces, one small entry per session seen, so traces of millions of lines replay
in constant memory.  Errors name the file, the line and the field.

Each line is first decoded by ``msgspec`` into a typed row (:class:`_TypedRow`), which
checks types and ranges in C; a line it refuses (or one that needs a message) goes through
the Python checks, which accept what they accept (integral floats such as ``12.0``) and
word every error.  Both give the same values for every line the typed decoder accepts.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from array import array
from pathlib import Path
from typing import IO, Annotated, Any, Iterator, Union

from ..errors import WorkloadError
from .request import MAX_TOKENS, Request

try:  # a dependency; without it every line takes the Python checks (same results, slower)
    import msgspec
except ImportError:  # pragma: no cover - installed with servesim
    msgspec = None

_MISSING = object()
_INT_ONLY = {int}
#: ``json.loads`` without its per-call type checks (lines are str).
_decode_json = json.JSONDecoder().decode


def _show(value: Any) -> str:
    """A short JSON rendering of an offending value for error messages."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):  # pragma: no cover - values come from json.loads
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class _Row:
    """Field access for one parsed line, raising errors that name file, line and field."""

    __slots__ = ("path", "line_no", "obj")

    def __init__(self, path: Path, line_no: int, obj: dict[str, Any]) -> None:
        self.path = path
        self.line_no = line_no
        self.obj = obj

    @property
    def where(self) -> str:
        """``file:line``, for messages (built only when one is raised)."""
        return f"{self.path}:{self.line_no}"

    def fail(self, field: str, expected: str, value: Any = _MISSING) -> WorkloadError:
        got = "it is missing" if value is _MISSING else f"got {_show(value)}"
        return WorkloadError(f"{self.where}: field '{field}': expected {expected}, {got}")

    def integer(self, field: str, minimum: int, required: bool = True, maximum: int | None = None) -> int | None:
        value = self.obj.get(field, _MISSING)
        if value is _MISSING:
            if required:
                raise self.fail(field, _integer_range(minimum, maximum))
            return None
        as_int = _as_int(value)
        if as_int is None or as_int < minimum or (maximum is not None and as_int > maximum):
            raise self.fail(field, _integer_range(minimum, maximum), value)
        return as_int

    def number(self, field: str, required: bool = True) -> float | None:
        value = self.obj.get(field, _MISSING)
        if value is _MISSING:
            if required:
                raise self.fail(field, "a number >= 0")
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
        ):
            raise self.fail(field, "a number >= 0", value)
        return float(value)

    def key(self, field: str) -> str | None:
        """An optional identifier field (string or integer), as a string."""
        value = self.obj.get(field, _MISSING)
        if value is _MISSING or value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise self.fail(field, "a string or an integer", value)
        return str(value)


if msgspec is not None:
    _Length = Annotated[int, msgspec.Meta(ge=1, le=MAX_TOKENS)]
    _Number = Union[Annotated[int, msgspec.Meta(ge=0)], Annotated[float, msgspec.Meta(ge=0)]]

    class _TypedRow(msgspec.Struct):
        """The fields of a line as the Python checks accept them, minus integral floats for
        integers (msgspec keeps ints and floats apart, refuses booleans for either, and JSON
        has no infinities or NaNs)."""

        input_length: _Length
        output_length: _Length
        timestamp: _Number | None = None
        hash_ids: list[Annotated[int, msgspec.Meta(ge=0)]] | None = None
        session_id: str | int | None = None
        request_id: str | int | None = None
        delay: _Number | None = None

    _decode_typed = msgspec.json.Decoder(_TypedRow).decode
    _TYPED_ERRORS = (msgspec.ValidationError, msgspec.DecodeError)

    class _IdsRow(msgspec.Struct):
        """A line's block ids alone (see :func:`listed_block_ids`)."""

        hash_ids: list[Annotated[int, msgspec.Meta(ge=0)]] | None = None

    _decode_ids = msgspec.json.Decoder(_IdsRow).decode

#: A line's fields: session id, whether the row is a later turn of a session seen before,
#: input and output lengths, hash ids (or None), request id (or None), then for a later turn
#: the delay in ms, for any other row the timestamp in ms and the timestamp as written.
_Fields = tuple[str | None, bool, int, int, "tuple[int, ...] | None", str | None, float, Any]


def _typed_fields(line: str, block_size: int, sessions: dict) -> _Fields | None:
    """The line's fields from the typed decoder, or None if it refuses the line or the line
    needs the Python checks (a wrong hash-id count, a missing delay or timestamp: they word
    the error; a first turn with a delay the typed row refuses: they ignore it)."""
    try:
        row = _decode_typed(line)
    except _TYPED_ERRORS:
        return None
    input_length = row.input_length
    hash_ids = row.hash_ids
    if hash_ids is not None:
        if len(hash_ids) != -(-input_length // block_size):
            return None
        hash_ids = tuple(hash_ids)
    session_id = row.session_id
    if session_id is not None:
        session_id = str(session_id)
    later_turn = session_id is not None and session_id in sessions
    written = row.delay if later_turn else row.timestamp
    if written is None:
        return None
    request_id = row.request_id
    return (session_id, later_turn, input_length, row.output_length, hash_ids,
            None if request_id is None else str(request_id), float(written), written)


def _checked_fields(path: Path, line_no: int, line: str, block_size: int, sessions: dict) -> _Fields:
    """The line's fields through the Python checks, which raise an error naming the line and
    the field for anything they refuse."""
    try:
        obj = _decode_json(line)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{path}:{line_no}: invalid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise WorkloadError(f"{path}:{line_no}: expected a JSON object, got {_show(obj)}")
    row = _Row(path, line_no, obj)
    session_id = row.key("session_id")
    later_turn = session_id is not None and session_id in sessions
    input_length = row.integer("input_length", 1, maximum=MAX_TOKENS)
    output_length = row.integer("output_length", 1, maximum=MAX_TOKENS)
    assert input_length is not None and output_length is not None
    hash_ids = _parse_hash_ids(row, input_length, block_size)
    request_id = row.key("request_id")
    if later_turn:
        delay_ms = row.number("delay", required=False)
        if delay_ms is None:
            raise row.fail("delay", f"a number >= 0 (ms) for a later turn of session '{session_id}'")
        row.number("timestamp", required=False)  # validated, otherwise ignored
        return session_id, True, input_length, output_length, hash_ids, request_id, delay_ms, obj["delay"]
    timestamp = row.number("timestamp")
    assert timestamp is not None
    return session_id, False, input_length, output_length, hash_ids, request_id, timestamp, obj["timestamp"]


def _integer_range(minimum: int, maximum: int | None) -> str:
    return f"an integer >= {minimum}" if maximum is None else f"an integer from {minimum} to {maximum:,}"


def _as_int(value: Any) -> int | None:
    """``value`` as an int if it is an integral JSON number (not a bool), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _open(path: Path) -> IO[str]:
    """The trace as text with universal newlines; ``utf-8-sig`` drops a byte-order mark, and
    ``surrogateescape`` keeps a byte that is not UTF-8 for :func:`_lines` to report with its line
    (a strict decoder fails on the whole chunk it reads, before any line number is known)."""
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig", errors="surrogateescape")
    return open(path, "r", encoding="utf-8-sig", errors="surrogateescape")


def _lines(fh: IO[str], path: Path) -> Iterator[tuple[int, str]]:
    """Numbered lines of an open trace; a file that cannot be read or decoded stops with a
    :class:`WorkloadError` naming it and, for text that is not UTF-8, the line and column."""
    line_no = 0
    try:  # around the loop (not each read): the consumer's own errors never pass through here
        for line in fh:
            line_no += 1
            if not line.isascii():
                try:
                    line.encode("utf-8")
                except UnicodeEncodeError as exc:  # an escaped byte (surrogate) that was not UTF-8
                    byte = ord(line[exc.start]) - 0xDC00
                    raise WorkloadError(f"{path}:{line_no}: not UTF-8 text (byte 0x{byte:02x} at column "
                                        f"{exc.start + 1}); traces are UTF-8 JSON lines") from None
            yield line_no, line
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise WorkloadError(f"{path}: not a complete gzip file ({exc}); a trace named .gz must be "
                            "gzip-compressed JSON lines") from None
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read ({exc})") from None


def _parse_hash_ids(row: _Row, input_length: int, block_size: int) -> tuple[int, ...] | None:
    value = row.obj.get("hash_ids", _MISSING)
    if value is _MISSING or value is None:
        return None
    if not isinstance(value, list):
        raise row.fail("hash_ids", "a list of integers >= 0", value)
    # Fast path: a list of non-negative Python ints (every real trace); type() tells bool from int.
    if value and (set(map(type, value)) != _INT_ONLY or min(value) < 0):
        for i, x in enumerate(value):
            as_int = _as_int(x)
            if as_int is None or as_int < 0:
                raise row.fail(f"hash_ids[{i}]", "an integer >= 0", x)
        value = [_as_int(x) for x in value]
    needed = -(-input_length // block_size)
    if len(value) != needed:
        raise WorkloadError(
            f"{row.where}: field 'hash_ids': expected {needed} block ids "
            f"(ceil(input_length {input_length} / block_size {block_size})), got {len(value)}; "
            "is block_size right?"
        )
    return tuple(value)


def _duplicate_id(path: Path, line_no: int, request_id: str, first: int) -> WorkloadError:
    return WorkloadError(f"{path}:{line_no}: field 'request_id': {_show(request_id)} was already used on line "
                         f"{first} (a line without request_id is named L<line number>); request ids must be unique")


def listed_block_ids(path: str | Path) -> array | None:
    """The ``hash_ids`` of every line of the trace, one after another (C ``long long``s), read
    without building requests: ``workload/sharing.py`` counts them before a run.

    Every line counts, also those a window or a limit skips (an id counted once too often is
    only taken as shared).  Prompts without ``hash_ids`` get ids of their own, which no other
    line lists.  None when a line needs the full reader (one the typed decoder refuses: the
    Python checks may still accept it, or word its error) or an id exceeds 64 bits.
    """
    if msgspec is None:
        return None
    out = array("q")
    try:
        with _open(Path(path)) as fh:
            for _, line in _lines(fh, Path(path)):
                if line.strip():
                    ids = _decode_ids(line).hash_ids
                    if ids:
                        out.extend(ids)
    except (_TYPED_ERRORS + (OverflowError, WorkloadError)):
        return None
    return out


def read_mooncake(
    path: str | Path,
    *,
    block_size: int = 512,
    speedup: float = 1.0,
    start_ms: float | None = None,
    end_ms: float | None = None,
    limit: int | None = None,
    counts: dict[str, int] | None = None,
) -> Iterator[Request]:
    """Requests of a Mooncake JSONL trace (``.jsonl`` or ``.jsonl.gz``), read lazily.

    Independent rows (no session, or a session's first row) with a timestamp outside
    ``[start_ms, end_ms]`` are skipped, and so are the later turns of a skipped session.
    Arrivals are ``(timestamp - start_ms) / speedup`` in seconds (``start_ms`` defaults to
    0); session delays are divided by ``speedup`` too.  At most ``limit`` requests are
    yielded, and reading stops as soon as the limit is reached.

    The file's existence is checked now; everything else is checked as lines are read.
    ``counts`` (optional) receives what the reader skipped: ``blank_lines``, reset each time
    the returned iterator starts.
    """
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(f"{path}: trace file not found")
    if block_size <= 0 or speedup <= 0:
        raise ValueError("block_size and speedup must be > 0")
    return _read(path, block_size, speedup, start_ms, end_ms, limit, counts if counts is not None else {})


def _read(
    path: Path,
    block_size: int,
    speedup: float,
    start_ms: float | None,
    end_ms: float | None,
    limit: int | None,
    counts: dict[str, int],
) -> Iterator[Request]:
    origin_ms = start_ms if start_ms is not None else 0.0
    ms_per_s = 1000.0 * speedup  # divide (not multiply) so 1500 ms -> exactly 1.5 s
    # session id -> (index of its latest yielded turn, that turn's number), or None when
    # the session's first turn fell outside the window.  One small entry per session.
    sessions: dict[str, tuple[int, int] | None] = {}
    kept_sessions = 0
    emitted = 0
    own_ids = 0  # counter for ids of prompts without hash_ids: -1, -2, ...
    last_ts: float | None = None
    last_ts_line = 0
    last_ts_written: Any = None  # the previous timestamp as written, for messages

    counts["blank_lines"] = 0
    # request id -> line it was first on; only ids the trace writes (``L<line>`` ids are
    # unique), so a trace without ids holds nothing here.
    ids_seen: dict[str, int] = {}
    if limit is not None and limit <= 0:
        return
    typed = msgspec is not None
    with _open(path) as fh:
        for line_no, line in _lines(fh, path):
            if not line.strip():
                counts["blank_lines"] += 1
                continue
            fields = _typed_fields(line, block_size, sessions) if typed else None
            if fields is None:
                fields = _checked_fields(path, line_no, line, block_size, sessions)
            session_id, later_turn, input_length, output_length, hash_ids, request_id, ms, written = fields
            if request_id is None:
                request_id = f"L{line_no}"
                if ids_seen:  # a trace that writes ids: its unnamed lines' ids are checked too
                    first = ids_seen.setdefault(request_id, line_no)
                    if first != line_no:
                        raise _duplicate_id(path, line_no, request_id, first)
            else:
                first = ids_seen.setdefault(request_id, line_no)
                if first != line_no:
                    raise _duplicate_id(path, line_no, request_id, first)

            if later_turn:
                state = sessions[session_id]
                if state is None:  # the session's first turn fell outside the window
                    continue
                prev_index, prev_turn = state
                turn = prev_turn + 1
                arrival, after, delay = math.nan, prev_index, ms / ms_per_s
            else:
                timestamp = ms
                if last_ts is not None and timestamp < last_ts:
                    raise WorkloadError(
                        f"{path}:{line_no}: field 'timestamp': expected a value >= {_show(last_ts_written)} "
                        f"(the timestamp on line {last_ts_line}; rows must be in arrival order), "
                        f"got {_show(written)}"
                    )
                last_ts, last_ts_line, last_ts_written = timestamp, line_no, written
                if (start_ms is not None and timestamp < start_ms) or (
                    end_ms is not None and timestamp > end_ms
                ):
                    if session_id is not None:
                        sessions[session_id] = None
                    if end_ms is not None and timestamp > end_ms and kept_sessions == 0:
                        return  # timestamps only grow: nothing later can be kept
                    continue
                turn = 0
                arrival, after, delay = (timestamp - origin_ms) / ms_per_s, None, 0.0
                if session_id is not None:
                    kept_sessions += 1

            if hash_ids is None:
                n_blocks = -(-input_length // block_size)
                hash_ids = tuple(range(-1 - own_ids, -1 - own_ids - n_blocks, -1))
                own_ids += n_blocks

            index = emitted
            if session_id is not None:
                sessions[session_id] = (index, turn)
            emitted += 1
            yield Request(
                index=index,
                request_id=request_id,
                arrival=arrival,
                input_length=input_length,
                output_length=output_length,
                hash_ids=hash_ids,
                block_size=block_size,
                session_id=session_id,
                turn=turn,
                after=after,
                delay=delay,
            )
            if limit is not None and emitted >= limit:
                return
