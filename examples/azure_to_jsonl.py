"""Convert an Azure LLM inference trace (CSV) to the JSONL trace format servesim reads.

The Azure public traces (github.com/Azure/AzurePublicDataset: AzureLLMInferenceTrace_code.csv,
AzureLLMInferenceTrace_conv.csv, and the 2024 week-long ones) have one row per request with
``TIMESTAMP`` (a date and time), ``ContextTokens`` and ``GeneratedTokens``.  They carry no
prompt content or block hashes, so replayed requests share no prefix (no prefix-cache reuse).

    python examples/azure_to_jsonl.py AzureLLMInferenceTrace_conv.csv azure_conv.jsonl

Rows with zero tokens are skipped (servesim needs a prompt and at least one output token);
the count is printed.
"""

from __future__ import annotations

import csv
import json
import sys
from datetime import datetime
from pathlib import Path


def _time(text: str) -> datetime:
    # "2023-11-16 18:15:46.6805900": seven fractional digits, more than datetime parses
    head, _, frac = text.strip().partition(".")
    return datetime.fromisoformat(head + ("." + frac[:6] if frac else ""))


def convert(src: Path, dst: Path) -> tuple[int, int]:
    """Write ``dst`` from ``src``; returns (rows written, rows skipped)."""
    written = skipped = 0
    t0 = None
    with src.open(newline="") as f, dst.open("w") as out:
        for row in csv.DictReader(f):
            t = _time(row["TIMESTAMP"])
            t0 = t0 or t
            inp, gen = int(row["ContextTokens"]), int(row["GeneratedTokens"])
            if inp < 1 or gen < 1:
                skipped += 1
                continue
            ms = (t - t0).total_seconds() * 1000.0
            out.write(json.dumps({"timestamp": round(ms, 3), "input_length": inp, "output_length": gen}) + "\n")
            written += 1
    return written, skipped


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python examples/azure_to_jsonl.py TRACE.csv OUT.jsonl")
    n, skipped = convert(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"wrote {sys.argv[2]}: {n} requests ({skipped} rows with zero tokens skipped)")
