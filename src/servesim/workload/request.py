"""The request record that flows from a workload source through routers and engines.

A request's prompt is described the way Mooncake traces describe it: ``hash_ids`` name
consecutive blocks of ``block_size`` tokens (the last block may be partial); equal ids at
the same position mean identical content, hence a reusable prefix.  The KV caches work on
*units* ``(block_id, n_tokens)`` derived from these ids (see :func:`sequence_units`).
"""

from __future__ import annotations

from servesim.compiled import compiled_module

# Id spaces for blocks that must never match anything else.  Trace ids are >= 0.
OUTPUT_ID_BASE = -(1 << 60)

#: Largest input or output length a workload may give (tokens).  No model's context comes
#: near it; a larger value is an input mistake, and would overflow the simulator's integer
#: columns or build millions of block ids before any engine could reject the request.
MAX_TOKENS = 100_000_000


def output_block_id(request_index: int, block: int) -> int:
    """A block id for generated tokens of one request: unique, never shared."""
    return OUTPUT_ID_BASE - (request_index << 24) - block


#: Request's fields, in order: its constructor's parameters, its repr and its equality.
REQUEST_FIELDS = ("index", "request_id", "arrival", "input_length", "output_length", "hash_ids", "block_size",
                  "session_id", "turn", "after", "delay", "output_hash_ids", "warmup")


class Request:
    """One inference request as the workload presents it to the deployment.

    Times are in seconds of virtual time.  ``index`` is the dense position of the request
    in the run (0..N-1), assigned by the workload source, and is what every column store
    and engine uses to refer to it.

    A plain class with a dataclass's constructor, repr and equality, not a dataclass:
    ``workload/request.pxd`` makes it an extension type when the module is compiled, so that
    a workload builds one, and the compiled loop reads its fields, without the interpreter.
    """

    __slots__ = REQUEST_FIELDS

    def __init__(self, index: int, request_id: str, arrival: float, input_length: int, output_length: int,
                 hash_ids: tuple[int, ...], block_size: int = 512, session_id: str | None = None, turn: int = 0,
                 after: int | None = None, delay: float = 0.0, output_hash_ids: tuple[int, ...] = (),
                 warmup: bool = False) -> None:
        self.index = index
        self.request_id = request_id
        self.arrival = arrival
        self.input_length = input_length
        self.output_length = output_length
        #: Ids of the prompt's blocks of ``block_size`` tokens (the last may be partial).
        self.hash_ids = hash_ids
        self.block_size = block_size
        self.session_id = session_id
        self.turn = turn
        #: For a later turn of a session: index of the previous turn, and the think time
        #: (seconds) between that turn finishing and this one arriving.  ``arrival`` is then
        #: filled in by the simulation.
        self.after = after
        self.delay = delay
        #: Block ids continuing the sequence's block grid after the prompt's last block
        #: (``hash_ids``), covering generated tokens.  Synthetic multi-turn sessions set
        #: these so that the next turn can reuse the previous answer; past them, generated
        #: tokens get ids that match nothing.
        self.output_hash_ids = output_hash_ids
        #: Warm-up requests run like any other but are excluded from the metrics.
        self.warmup = warmup

    def fields(self) -> tuple:
        """The field values, in :data:`REQUEST_FIELDS` order."""
        return (self.index, self.request_id, self.arrival, self.input_length, self.output_length, self.hash_ids,
                self.block_size, self.session_id, self.turn, self.after, self.delay, self.output_hash_ids,
                self.warmup)

    def replace(self, **changes) -> Request:
        """A copy with the given fields changed (``dataclasses.replace``)."""
        unknown = set(changes) - set(REQUEST_FIELDS)
        if unknown:
            raise TypeError(f"Request has no field(s) {sorted(unknown)}")
        values = dict(zip(REQUEST_FIELDS, self.fields()))
        values.update(changes)
        return Request(**values)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.fields() == other.fields()

    __hash__ = None  # mutable, compared by value: unhashable, as a dataclass with eq

    def __repr__(self) -> str:
        return "Request(" + ", ".join(f"{name}={value!r}" for name, value in zip(REQUEST_FIELDS, self.fields())) + ")"

    def __reduce__(self):
        return (Request, self.fields())


def sequence_units(req: Request, n_tokens: int) -> list[tuple[int, int]]:
    """Units ``(block_id, tokens)`` covering the first ``n_tokens`` of the request's sequence.

    The sequence (prompt, then generated tokens) is cut into blocks of ``block_size``
    tokens.  Block ``k`` has id ``hash_ids[k]`` while ``k < len(hash_ids)``, then
    ``output_hash_ids[k - len(hash_ids)]``, then an id unique to this request.  Each unit
    is a run of tokens from the start of its block; two units with the same id share
    ``min(tokens)`` leading tokens.  So a block that the prompt fills only partly keeps
    its id for the generated tokens that complete it, as in a trace where the next turn
    of a conversation carries the previous answer.
    """
    bs = req.block_size
    n_full, rem = divmod(n_tokens, bs)
    n_blocks = n_full + (1 if rem else 0)
    return [(_block_id(req, k), bs if k < n_full else rem) for k in range(n_blocks)]


def _block_id(req: Request, k: int) -> int:
    """Block ``k``'s id in the request's sequence (the rule :func:`sequence_units` states)."""
    n_ids = len(req.hash_ids)
    if k < n_ids:
        return req.hash_ids[k]
    if k - n_ids < len(req.output_hash_ids):
        return req.output_hash_ids[k - n_ids]
    return output_block_id(req.index, k - n_ids)


def sequence_block_ids(req: Request, first: int, stop: int) -> list[int]:
    """Ids of blocks ``first .. stop - 1`` of the request's block grid (the ids of
    :func:`sequence_units`), without building the units before ``first``: an engine that
    extends a unit chain reads only the blocks it has not chained yet."""
    return [_block_id(req, k) for k in range(max(first, 0), stop)]


def sequence_segments(req: Request, start: int, stop: int) -> list[tuple[int, int, int]]:
    """Tokens ``[start, stop)`` of the request's sequence as segments ``(block_id, first, end)``:
    tokens ``[first, end)`` of each block of :func:`sequence_units`' grid that the range touches.

    What the radix cache compares (``kvcache/segments.py``); an engine that walks the tree
    from a node ``start`` tokens in reads only the sequence after it, so the blocks before
    ``start`` are never built.
    """
    bs = req.block_size
    start = max(start, 0)
    if stop <= start:
        return []
    # Only the blocks the range touches: the cost follows the range, not the prefix before it.
    return [(_block_id(req, k), max(start - k * bs, 0), min(stop - k * bs, bs))
            for k in range(start // bs, (stop - 1) // bs + 1)]


#: The Python versions of :func:`sequence_units`, :func:`sequence_block_ids` and
#: :func:`sequence_segments`, the references of ``workload/_units_core.pyx``.
python_sequence_units = sequence_units
python_sequence_block_ids = sequence_block_ids
python_sequence_segments = sequence_segments

_core = compiled_module("workload._units_core")  # bound at import: servesim/compiled.py's rule
if _core is not None:
    sequence_units = _core.sequence_units  # noqa: F811
    sequence_block_ids = _core.sequence_block_ids  # noqa: F811
    sequence_segments = _core.sequence_segments  # noqa: F811
