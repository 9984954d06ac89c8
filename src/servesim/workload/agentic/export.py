"""Writing an agentic graph as AISimulate's ``agentic_mooncake`` v2 (to replay the same plays
in another simulator, or to keep a generated workload as a trace).

Every prompt is written in full (``hash_ids`` of every block, resolved deltas included); a
node's floor is its play's start plus its own ``not_before``; ``first_token`` dependencies,
which v2 cannot express, are written as ``dispatch`` ones (an error unless ``lenient``).
Ids are written as they are in the graph (dense, one id space), under ``hash_id_scope: local``
with every play's ids distinct from other plays' only where the graph made them so.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Sequence

from .graph import AgenticGraph, PlayStart

_RELATION = {"sequence": "sequence", "spawn": "spawn", "join": "join", "barrier": "replay_barrier"}


def write_agentic_mooncake_v2(graph: AgenticGraph, starts: Sequence[PlayStart], path: Path,
                              model: str = "model", lenient: bool = False) -> int:
    """Write the plays started in ``starts`` (generation 0 only) at their start times; returns rows written."""
    opener = gzip.open if str(path).endswith(".gz") else open
    rows = 0
    with opener(path, "wt") as fh:
        fh.write(json.dumps({"schema": "dynamo.agentic_mooncake", "version": 2, "block_size": graph.block_size,
                             "hash_id_scope": "local", "source": {"format": "servesim", "digest": graph.description}})
                 + "\n")
        for s in starts:
            if s.generation:
                raise ValueError("only original plays (generation 0) can be written: copies need fresh ids")
            play = graph.plays[s.play]
            for i in play.nodes:
                n = graph.nodes[i]
                deps = []
                for d in n.deps:
                    on = d.on
                    if on == "first_token":
                        if not lenient:
                            raise ValueError(f"node {n.node_id}: a first_token dependency has no v2 form")
                        on = "dispatch"
                    deps.append({"request_id": graph.nodes[d.source].node_id, "trigger": on,
                                 "delay_ms": d.delay * 1000.0, "relation": _RELATION[d.relation]})
                row = {"request_id": n.node_id, "play_id": play.play_id, "session_id": n.session,
                       "model": n.model or model, "not_before_ms": (s.time + n.not_before) * 1000.0,
                       "input_length": n.input_length, "output_length": max(n.output_length, 1),
                       "hash_ids": list(n.hash_ids)}
                if deps:
                    row["dependencies"] = deps
                fh.write(json.dumps(row) + "\n")
                rows += 1
    return rows
