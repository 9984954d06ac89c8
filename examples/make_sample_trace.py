"""Write examples/traces/sample_chat.jsonl: a small multi-turn chat trace in the Mooncake format.

The quickstart needs a trace that a fresh clone has; this one is generated, not measured:
    python examples/make_sample_trace.py            # rewrites the committed file, byte for byte
    python examples/make_sample_trace.py --out T    # writes it elsewhere

Traffic: conversations start as a Poisson process (``RATE`` per second); each has 1 to 5 turns
separated by a think time (exponential, mean ``THINK_S``).  Every conversation opens with one of
``SYSTEM_PROMPTS`` shared system prompts (``SYSTEM_BLOCKS`` blocks of 512 tokens), then a user
message; each later turn's prompt is the previous prompt, the previous answer and a new user
message, so its leading blocks repeat the previous turn's ``hash_ids`` (what a prefix cache
reuses).  Lengths are lognormal.  The format is the public Mooncake trace's (docs/workload.md):
``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids`` (one id per 512-token
block), and ``session_id`` / ``delay`` (ms after the previous turn finished) for later turns.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

SEED = 7
CONVERSATIONS = 400
RATE = 1.5  # conversations per second
THINK_S = 20.0
BLOCK = 512
SYSTEM_PROMPTS = 4
SYSTEM_BLOCKS = 2
OUT = Path(__file__).resolve().parent / "traces" / "sample_chat.jsonl"


def _lognormal(rng: np.random.Generator, median: float, sigma: float, lo: int, hi: int) -> int:
    return int(np.clip(round(median * np.exp(sigma * rng.standard_normal())), lo, hi))


def conversations(rng: np.random.Generator) -> list[dict]:
    """Every request, conversation after conversation (first turns in timestamp order)."""
    next_id = SYSTEM_PROMPTS * SYSTEM_BLOCKS  # ids below are the system prompts' blocks
    rows: list[dict] = []
    start = 0.0
    for conv in range(CONVERSATIONS):
        start += rng.exponential(1.0 / RATE)
        system = rng.integers(SYSTEM_PROMPTS)
        ids = [int(system * SYSTEM_BLOCKS + b) for b in range(SYSTEM_BLOCKS)]
        length = SYSTEM_BLOCKS * BLOCK
        shared = SYSTEM_BLOCKS  # leading blocks whose tokens the next prompt repeats exactly
        turns = int(rng.integers(1, 6))
        for turn in range(turns):
            length += _lognormal(rng, 300 if turn == 0 else 150, 0.8, 16, 6000)
            ids = ids[:shared]
            while len(ids) < -(-length // BLOCK):
                ids.append(next_id)
                next_id += 1
            output = _lognormal(rng, 220, 0.7, 4, 2000)
            row = {"input_length": length, "output_length": output, "hash_ids": list(ids),
                   "session_id": f"c{conv}"}
            if turn == 0:
                row = {"timestamp": round(start * 1000.0, 1), **row}
            else:
                row["delay"] = round(rng.exponential(THINK_S) * 1000.0, 1)
            rows.append(row)
            shared = length // BLOCK  # this prompt's whole blocks open the next one
            length += output
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the quickstart's sample chat trace (Mooncake format).")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write it (default: {OUT})")
    args = parser.parse_args(argv)
    rows = conversations(np.random.default_rng(SEED))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r, separators=(", ", ": ")) + "\n" for r in rows))
    print(f"wrote {args.out} ({len(rows)} requests)")


if __name__ == "__main__":
    main()
