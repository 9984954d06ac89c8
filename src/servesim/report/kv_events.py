"""The stream of KV events (blocks stored in and removed from each worker's cache), as JSONL.

Opt-in with ``output.kv_events: true``; one line per event, in the order they happened:
``{"time": s, "worker": w, "kind": "stored"|"removed", "tier": "gpu", "tokens": n,
"blocks": [...]}``.  ``blocks`` are chained block hashes for vLLM / TensorRT-LLM and the
trace's block ids for SGLang's radix cache (whose nodes may cover part of a block).
"""

from __future__ import annotations

import json
from pathlib import Path

from servesim.kvcache.events import KVEvent


class KVEventLog:
    """Collects stamped events in memory (compact tuples) and writes them at the end."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []

    def __call__(self, ev: KVEvent) -> None:
        self.rows.append((ev.time, ev.worker, ev.kind, ev.tier, ev.tokens, ev.block_hashes))

    def write(self, path: Path) -> None:
        # Workers publish when their passes commit, and a fast-forwarded stretch commits
        # events stamped with its earlier pass times: order the stream by virtual time
        # (stable, so one worker's events at one instant keep their order).
        rows = sorted(self.rows, key=lambda r: r[0])
        with open(path, "w") as fh:
            for t, w, kind, tier, tokens, blocks in rows:
                fh.write(json.dumps({"time": t, "worker": w, "kind": kind, "tier": tier, "tokens": tokens,
                                     "blocks": list(blocks)}, separators=(",", ":")))
                fh.write("\n")
