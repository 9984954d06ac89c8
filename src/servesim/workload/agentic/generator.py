"""Synthetic agent plays (``workload: {kind: agentic}``), lowered into the same graph as traces.

A play: the main agent's turns form one session whose prompt grows by each answer and tool
output (each turn *extends* the previous one, so a prefix cache can hold the whole context);
a turn may spawn subagents, each a session of its own starting from the shared system
prompt; joined subagents gate the main agent's next turn and their answers join its
context; background ones run on their own.  Compaction restarts the main context from a
summary.  Every length and delay is drawn from a seeded numpy generator, play by play, in a
fixed order, so a seed gives the same plays.
"""

from __future__ import annotations

import numpy as np

from ..config import AgentWorkload
from ..distributions import sample_durations, sample_lengths
from .graph import AgenticGraph, GraphBuilder, RawDep

#: Raw ids of the shared system prompt's blocks (trace ids are >= 0; the rest are fresh).
_SYSTEM = 0


def generate_agentic(cfg: AgentWorkload, seed: int) -> AgenticGraph:
    rng = np.random.default_rng(seed)
    bs = cfg.block_size
    sys_ids = list(range(_SYSTEM, _SYSTEM + cfg.system_prompt // bs))
    g = GraphBuilder(f"agentic synthetic ({cfg.plays} plays)", bs)
    for p in range(cfg.plays):
        _play(g, cfg, rng, f"play{p}", sys_ids)
    return g.build()


def _one(dist, rng) -> int:
    return int(sample_lengths(dist, rng, 1)[0])


def _play(g: GraphBuilder, cfg: AgentWorkload, rng: np.random.Generator, play: str, sys_ids: list[int]) -> None:
    n_turns = _one(cfg.turns, rng)
    first_in = cfg.system_prompt + _one(cfg.task, rng)
    prev: str | None = None  # the turn the next one extends
    prev_ctx = 0  # the next turn's prompt length
    joins: list[str] = []
    extra = 0  # tokens the next turn's delta carries besides the tool output (joined answers)
    where = f"{play}"
    for k in range(n_turns):
        rid = f"{play}/main/{k}"
        out = _one(cfg.output, rng)
        deps = []
        if prev is None:
            g.add(rid, play, where=where, input_length=first_in, output_length=out, hash_ids=sys_ids,
                  session=f"{play}/main", agent="main", not_before=0.0)
            ctx = first_in
        else:
            tool_out = _one(cfg.tool_output, rng)
            delay = float(sample_durations(cfg.tool_latency_s, rng, 1)[0])
            deps.append(RawDep(prev, "completion", delay, "tool", "sequence", where))
            deps += [RawDep(j, "completion", 0.0, "other", "join", where) for j in joins]
            delta = tool_out + extra
            c = cfg.compaction
            if c is not None and prev_ctx + delta > c.threshold:
                ctx = cfg.system_prompt + c.summary
                g.add(rid, play, where=where, input_length=ctx, output_length=out, hash_ids=sys_ids, deps=deps,
                      session=f"{play}/main", agent="main")
            else:
                ctx = prev_ctx + delta
                g.add(rid, play, where=where, input_length=delta, output_length=out, delta_of=prev, deps=deps,
                      session=f"{play}/main", agent="main")
        prev, prev_ctx = rid, ctx + out
        joins, extra = [], 0
        s = cfg.subagents
        if s is not None and k + 1 < n_turns and rng.random() < s.probability:
            for j in range(_one(s.fanout, rng)):
                last, last_out = _subagent(g, cfg, rng, play, f"{k}.{j}", rid, sys_ids)
                if rng.random() >= s.background:
                    joins.append(last)
                    extra += last_out


def _subagent(g: GraphBuilder, cfg: AgentWorkload, rng: np.random.Generator, play: str, name: str, parent: str,
              sys_ids: list[int]) -> tuple[str, int]:
    """One subagent's turns; returns its last request and that request's answer length."""
    s = cfg.subagents
    assert s is not None
    n = _one(s.turns, rng)
    prev, out = "", 0
    for k in range(n):
        rid = f"{play}/sub{name}/{k}"
        out = _one(cfg.output, rng)
        session = f"{play}/sub{name}"
        if k == 0:
            g.add(rid, play, where=play, input_length=cfg.system_prompt + _one(s.task, rng), output_length=out,
                  hash_ids=sys_ids, deps=[RawDep(parent, "completion", 0.0, "other", "spawn", play)],
                  session=session, agent="subagent")
        else:
            delay = float(sample_durations(cfg.tool_latency_s, rng, 1)[0])
            g.add(rid, play, where=play, input_length=_one(cfg.tool_output, rng), output_length=out, delta_of=prev,
                  deps=[RawDep(prev, "completion", delay, "tool", "sequence", play)], session=session,
                  agent="subagent")
        prev = rid
    return prev, out
