"""Synthetic open-loop traffic: arrivals, lengths, shared prefixes and multi-turn sessions.

Random numbers are drawn in chunks of sessions with numpy (see :mod:`.distributions`);
only the assembly of each :class:`Request` is a Python loop.  The draw order is fixed,
so a seed always gives the same requests.

Block ids (``hash_ids``) are non-negative integers handed out by one counter, so two
blocks share an id only when this module means them to share content:

- a prefix group owns the ids of the *full* blocks of its prefix; the block in which the
  prefix ends (when ``length`` is not a multiple of ``block_size``) also holds the
  request's own tokens, so it gets a fresh id;
- turn k+1 of a session repeats the ids of every block that turn k's prompt and answer
  fill completely (turn k's ``hash_ids`` then its ``output_hash_ids``, the grid that
  :func:`~servesim.workload.request.sequence_units` walks); the block where the answer
  ends and the new user input begins gets a fresh id, as do the blocks after it.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from .config import SyntheticWorkload
from .distributions import interarrival_gaps, sample_durations, sample_lengths
from .request import Request

#: Sessions drawn per numpy batch: large enough to amortise numpy calls, small enough to
#: keep memory flat for any ``num_requests``.
CHUNK_SESSIONS = 16384


class BlockIdAllocator:
    """Hands out fresh, never-repeated block ids 0, 1, 2, ..."""

    __slots__ = ("next_id",)

    def __init__(self) -> None:
        self.next_id = 0

    def take(self, n: int) -> tuple[int, ...]:
        """``n`` fresh ids (empty for ``n <= 0``)."""
        if n <= 0:
            return ()
        start = self.next_id
        self.next_id = start + n
        return tuple(range(start, start + n))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def generate_synthetic(cfg: SyntheticWorkload, seed: int) -> Iterator[Request]:
    """Yield ``cfg.num_requests`` requests; first turns in arrival order, each later turn
    right after the turn it follows (``after`` = that turn's index, ``arrival`` = nan)."""
    rng = np.random.default_rng(seed)
    bs = cfg.block_size
    ids = BlockIdAllocator()

    prefix = cfg.prefix
    group_ids: list[tuple[int, ...]] = []
    if prefix is not None:
        group_ids = [ids.take(prefix.length // bs) for _ in range(prefix.num_groups)]

    sessions = cfg.sessions
    # The config's fields as locals: the loop below reads them per request, and a pydantic
    # model's attribute lookup is a slow path.
    num_requests = cfg.num_requests
    prefix_length = prefix.length if prefix is not None else 0
    index = 0
    session_no = 0
    next_arrival = 0.0

    while index < num_requests:
        remaining = num_requests - index
        n_sessions = min(CHUNK_SESSIONS, remaining)  # every session has >= 1 turn

        # --- draws for the chunk, in a fixed order --------------------------------
        gaps = interarrival_gaps(cfg.arrival, rng, n_sessions)
        arrivals = next_arrival + np.concatenate(([0.0], np.cumsum(gaps[:-1])))
        next_arrival = float(arrivals[-1] + gaps[-1])
        first_inputs = sample_lengths(cfg.input, rng, n_sessions)
        uses_prefix: list[bool] = []
        groups: list[int] = []
        new_inputs: list[int] = []
        think: list[float] = []
        if prefix is not None:
            uses_prefix = (rng.random(n_sessions) < prefix.share).tolist()
            groups = rng.integers(0, prefix.num_groups, size=n_sessions).tolist()
        if sessions is not None:
            turns = sample_lengths(sessions.turns, rng, n_sessions)
        else:
            turns = np.ones(n_sessions, dtype=np.int64)
        n_turns = int(turns.sum())
        outputs = sample_lengths(cfg.output, rng, n_turns).tolist()
        if sessions is not None:
            new_inputs = sample_lengths(sessions.new_input, rng, n_turns).tolist()
            think = sample_durations(sessions.think_time_s, rng, n_turns).tolist()

        # --- assembly --------------------------------------------------------------
        arrivals_l = arrivals.tolist()
        first_l = first_inputs.tolist()
        turns_l = turns.tolist()
        t = 0  # position in the per-turn arrays
        for s in range(n_sessions):
            session_id = f"s{session_no}" if sessions is not None else None
            session_no += 1
            n_turn = min(turns_l[s], num_requests - index)

            input_length = first_l[s]
            if prefix is not None and uses_prefix[s]:
                input_length = max(input_length, prefix_length + 1)
                shared = group_ids[groups[s]]
                hash_ids = shared + ids.take(_ceil_div(input_length, bs) - len(shared))
            else:
                hash_ids = ids.take(_ceil_div(input_length, bs))

            prev_index = -1
            for k in range(n_turn):
                output_length = outputs[t + k]
                last = k == n_turn - 1
                # Ids of the answer's blocks, needed only when a later turn reuses them.
                total = input_length + output_length
                output_ids = () if last else ids.take(_ceil_div(total, bs) - len(hash_ids))
                yield Request(
                    index=index,
                    request_id=f"r{index}",
                    arrival=arrivals_l[s] if k == 0 else float("nan"),
                    input_length=input_length,
                    output_length=output_length,
                    hash_ids=hash_ids,
                    block_size=bs,
                    session_id=session_id,
                    turn=k,
                    after=None if k == 0 else prev_index,
                    delay=0.0 if k == 0 else think[t + k],
                    output_hash_ids=output_ids,
                )
                prev_index = index
                index += 1
                if not last:
                    # Next prompt = this prompt + this answer + new user input.
                    full = hash_ids + output_ids
                    kept = full[: total // bs]
                    input_length = total + new_inputs[t + k + 1]
                    hash_ids = kept + ids.take(_ceil_div(input_length, bs) - len(kept))
            t += turns_l[s]
            if index >= num_requests:
                return
