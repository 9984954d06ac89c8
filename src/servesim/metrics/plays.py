"""Agent-level metrics of an agentic run: one row per play (plays.parquet) and the summary block.

A *play* here is one run of a play of the graph (a recycled play counts again).  Its
**makespan** runs from its first request's dispatch to its last request's terminal state;
its **outcome** is ``completed`` (every node completed), ``failed`` (a node was rejected:
the nodes not yet sent were skipped) or ``incomplete`` (the run ended first).

The **critical path** walks back from the play's last request: each request was released
by its floor or by one dependency (the one whose event plus delay came last: the driver
records it); following those links to the play's start splits the makespan exactly into
tool / think / other dependency delays, floor waits, and the queueing, prefill, KV transfer
and decode time of the requests whose completion (or first token) the next one waited for.
docs/outputs.md defines every column.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from servesim.metrics.prefix_seen import new_seen_prefixes
from servesim.metrics.recorder import RequestRecorder, Status
from servesim.metrics.stats import describe
from servesim.workload.agentic.phases import LANE_WARMUP, PLAY, PRIMER

if TYPE_CHECKING:
    from servesim.sim.agentic import AgenticDriver

OUTCOMES = ("completed", "failed", "incomplete")
#: Critical-path parts, in the order of plays.parquet's ``cp_*_s`` columns.
PATH_PARTS = ("tool", "think", "other_delay", "floor", "queue", "prefill", "kv_transfer", "decode", "stream")
#: plays.parquet's string columns (lists); the others are numpy arrays.
STRING_COLUMNS = ("play_id", "outcome", "final_request_id", "cp_path")
INT_COLUMNS = ("generation", "lane", "nodes", "history", "completed", "rejected", "unfinished", "cancelled", "skipped",
               "unsent",
               "peak_fanout", "input_tokens", "cached_tokens", "ideal_cached_tokens", "cp_requests")
_DONE, _REJ, _UNF, _CAN = int(Status.COMPLETED), int(Status.REJECTED), int(Status.UNFINISHED), int(Status.CANCELLED)


class _Cols:
    """The recorder columns the play metrics read, fetched once; ``srv_first`` / ``srv_finish``
    are the server-side times the driver saw (before a frontend's stream latency)."""

    def __init__(self, rec: RequestRecorder, server_times: dict[int, tuple[float, float]]) -> None:
        c = rec.column
        self.arrival, self.sched, self.first, self.finish = c("arrival"), c("first_scheduled"), c("first_token"), c("finish")
        self.srv_first, self.srv_finish = self.first.copy(), self.finish.copy()
        for r, (f, e) in server_times.items():
            self.srv_first[r], self.srv_finish[r] = f, e
        self.status, self.cached, self.inp = c("status"), c("cached_tokens"), c("input_length")
        ex = rec.extra_columns
        self.pe = ex["prefill_end_s"].data[: rec.size] if "prefill_end_s" in ex else None
        self.te = ex["transfer_end_s"].data[: rec.size] if "transfer_end_s" in ex else None


def play_rows(driver: "AgenticDriver", rec: RequestRecorder) -> dict[str, np.ndarray | list]:
    """plays.parquet's columns, one entry per play run, in start order."""
    g = driver.graph
    cols = _Cols(rec, driver.server_times)
    ideal = ideal_cached_tokens(driver, rec)
    out: dict[str, list] = {k: [] for k in (
        "play_id", "generation", "warmup", "lane", "outcome", "start_s", "first_dispatch_s", "end_s", "makespan_s",
        "recorded_makespan_s", "slowdown", "snapshot_cut_s", "nodes", "history", "completed", "rejected",
        "unfinished", "cancelled", "skipped", "unsent",
        "peak_fanout", "final_request_id", "final_ttft_s", "input_tokens", "cached_tokens", "ideal_cached_tokens",
        "prefix_reuse", "ideal_prefix_reuse", "cp_requests", "cp_path")}
    for part in PATH_PARTS:
        out[f"cp_{part}_s"] = []
    for run in driver.runs:
        play = g.plays[run.play]
        sent = [r for r in run.request if r >= 0]
        st = [int(cols.status[r]) for r in sent]
        n_done, n_rej, n_unf, n_can = st.count(_DONE), st.count(_REJ), st.count(_UNF), st.count(_CAN)
        skipped = sum(1 for s in run.state if s == 4)
        live = len(play.nodes) - run.history  # a snapshot's history was never to be sent
        outcome = "failed" if n_rej else ("completed" if n_done == live else "incomplete")
        first = min((float(cols.arrival[r]) for r in sent), default=math.nan)
        end = max((float(cols.finish[r]) for r in sent), default=math.nan)
        makespan = end - first if sent else math.nan
        final = _final_request(driver, run, cols)
        inp = int(sum(int(cols.inp[r]) for r in sent))
        cached = int(sum(int(cols.cached[r]) for r in sent))
        ideal_c = int(sum(int(ideal[r]) for r in sent))
        rec_ms = play.recorded_makespan * driver.scale if play.recorded_makespan else None
        path = critical_path(driver, run, cols) if outcome == "completed" else None
        out["play_id"].append(play.play_id if not run.generation else f"{play.play_id}#{run.generation}")
        out["generation"].append(run.generation)
        out["warmup"].append(run.warmup)
        out["lane"].append(run.lane)
        out["outcome"].append(outcome)
        out["start_s"].append(run.start)
        out["first_dispatch_s"].append(first)
        out["end_s"].append(end)
        out["makespan_s"].append(makespan)
        out["recorded_makespan_s"].append(rec_ms if rec_ms is not None else math.nan)
        out["slowdown"].append(makespan / rec_ms if rec_ms and outcome == "completed" else math.nan)
        out["snapshot_cut_s"].append(run.snapshot_cut)
        out["nodes"].append(len(play.nodes))
        out["history"].append(run.history)
        out["completed"].append(n_done)
        out["rejected"].append(n_rej)
        out["unfinished"].append(n_unf)
        out["cancelled"].append(n_can)
        out["skipped"].append(skipped)
        out["unsent"].append(live - len(sent) - skipped)
        out["peak_fanout"].append(run.peak_fanout)
        out["final_request_id"].append(rec.request_id[final] if final >= 0 else None)
        out["final_ttft_s"].append(float(cols.first[final] - cols.arrival[final]) if final >= 0 else math.nan)
        out["input_tokens"].append(inp)
        out["cached_tokens"].append(cached)
        out["ideal_cached_tokens"].append(ideal_c)
        out["prefix_reuse"].append(cached / inp if inp else math.nan)
        out["ideal_prefix_reuse"].append(ideal_c / inp if inp else math.nan)
        out["cp_requests"].append(len(path[1]) if path else 0)
        out["cp_path"].append(" > ".join(path[1]) if path else None)
        for part in PATH_PARTS:
            out[f"cp_{part}_s"].append(path[0][part] if path else math.nan)
    return {k: v if k in STRING_COLUMNS else np.asarray(v, dtype=bool if k == "warmup" else
                                                       np.int64 if k in INT_COLUMNS else np.float64)
            for k, v in out.items()}


def _final_request(driver: "AgenticDriver", run, cols: _Cols) -> int:
    """The play's final answer: the last request to finish in the session of its first root."""
    g = driver.graph
    play = g.plays[run.play]
    main = g.nodes[play.nodes[0]].session
    best, best_t = -1, -math.inf
    for k, i in enumerate(play.nodes):
        r = run.request[k]
        if r >= 0 and g.nodes[i].session == main and int(cols.status[r]) == _DONE and cols.finish[r] >= best_t:
            best, best_t = r, float(cols.finish[r])
    return best


def critical_path(driver: "AgenticDriver", run, cols: _Cols) -> tuple[dict[str, float], list[str]]:
    """The makespan split along the chain of releasing constraints, and the chain's request ids
    (first to last)."""
    g = driver.graph
    play = g.plays[run.play]
    parts = dict.fromkeys(PATH_PARTS, 0.0)
    sent = [(float(cols.finish[r]), r, k) for k, r in enumerate(run.request) if r >= 0]
    first_dispatch = min(float(cols.arrival[r]) for _, r, _ in sent)
    _, r, k = max(sent)
    parts["stream"] = float(cols.finish[r]) - float(cols.srv_finish[r])  # the client sees the end later
    upto = "completion"
    chain = []
    while True:
        i = play.nodes[k]
        chain.append(g.nodes[i].node_id)
        _service(parts, cols, r, upto)
        a = float(cols.arrival[r])
        c = run.cause[k]
        if c < 0:
            parts["floor"] += a - first_dispatch
            break
        dep = g.nodes[i].deps[c]
        src_k = run.local[dep.source]
        src = run.request[src_k]
        event = {"dispatch": cols.arrival, "first_token": cols.srv_first, "completion": cols.srv_finish}[dep.on][src]
        # The wait from the source's event to this dispatch: the dependency's delay, or less
        # where a profile's idle cap cut it short; more is a late release.
        waited = a - float(event)
        delay = min(dep.delay * driver.scale, waited)
        parts[dep.kind if dep.kind in ("tool", "think") else "other_delay"] += delay
        parts["other_delay"] += waited - delay
        r, k, upto = src, src_k, dep.on
    chain.reverse()
    return parts, chain


def _service(parts: dict[str, float], cols: _Cols, r: int, upto: str) -> None:
    """Request ``r``'s time from dispatch to ``upto`` (its first token or completion), by stage."""
    if upto == "dispatch":
        return
    a, s, f = float(cols.arrival[r]), float(cols.sched[r]), float(cols.srv_first[r])
    te = float(cols.te[r]) if cols.te is not None else math.nan
    if te == te:  # disaggregated: prefill worker, then the KV link, then the decode worker's admission
        pe = float(cols.pe[r])
        parts["queue"] += (s - a) + (f - te)
        parts["prefill"] += pe - s
        parts["kv_transfer"] += te - pe
    else:
        parts["queue"] += s - a
        parts["prefill"] += f - s
    if upto == "completion":
        parts["decode"] += float(cols.srv_finish[r]) - f


def ideal_cached_tokens(driver: "AgenticDriver", rec: RequestRecorder) -> np.ndarray:
    """Per request, the prompt tokens an unbounded prefix cache would hold at its dispatch: the
    leading full trace blocks that some earlier-sent request listed (prompt or answer blocks),
    at most ``input_length - 1`` (one token is always computed).  Whole trace blocks only: an
    engine with smaller blocks (or pages) can also reuse the leading part of a block that
    differs further on, so its actual reuse may pass this by up to a block per request.

    Prefixes are compared by a 64-bit rolling hash of their block ids; a seen prefix's own
    prefixes were seen with it, so the matched blocks are found by bisection
    (``metrics/prefix_seen.py``, which takes every request's sequence in one call)."""
    g = driver.graph
    bs = g.block_size
    out = np.zeros(rec.size, dtype=np.int64)
    sent: list[int] = []  # the requests that name blocks, in order
    prompts: list[tuple] = []
    answers: list[tuple] = []
    offsets: list[int] = []
    limits: list[int] = []
    for r in range(rec.size):
        node = g.nodes[driver.req_node[r]]
        # Every block the request's sequence names (a partly filled last prompt block is
        # completed by the answer, which a later prompt may carry), matched over full ones;
        # a warm-up copy generates one token: its prompt alone.
        answer = node.output_hash_ids if driver.req_phase[r] == PLAY else ()
        size = len(node.hash_ids) + len(answer)
        if not size:
            continue
        sent.append(r)
        prompts.append(node.hash_ids)
        answers.append(answer)
        offsets.append(g.id_offset(driver.runs[driver.req_run[r]].generation))
        limits.append(min(node.input_length // bs, size))
    if not sent:
        return out
    matched = new_seen_prefixes().match_sequences(prompts, answers, np.array(offsets, dtype=np.uint64),
                                                  np.array(limits, dtype=np.int64))
    inputs = np.array([g.nodes[driver.req_node[r]].input_length for r in sent], dtype=np.int64)
    out[sent] = np.minimum(matched * bs, inputs - 1)
    return out


def agentic_summary(driver: "AgenticDriver", rec: RequestRecorder, rows: dict) -> dict:
    """The summary's ``agentic`` block (docs/outputs.md): measured plays only (warm-up plays apart)."""
    keep = ~rows["warmup"]
    rows = {k: ([x for x, m in zip(v, keep) if m] if isinstance(v, list) else v[keep]) for k, v in rows.items()}
    outcome = rows["outcome"]
    done = np.array([o == "completed" for o in outcome], dtype=bool)
    mk, ttft_final, slow = rows["makespan_s"], rows["final_ttft_s"], rows["slowdown"]
    inp = int(rows["input_tokens"].sum())
    turn = rec.column("turn")
    ok = (rec.column("status") == _DONE) & ~rec.is_warmup
    ttft = rec.column("first_token") - rec.column("arrival")
    path = {p: float(np.nansum(rows[f"cp_{p}_s"][done])) for p in PATH_PARTS}
    total = sum(path.values())
    return {
        "plays": len(outcome),
        "warmup_plays": int((~keep).sum()),
        **{f"plays_{o}": int(sum(1 for x in outcome if x == o)) for o in OUTCOMES},
        "plays_not_started": driver.plays_not_started,
        "nodes": {k: int(rows[k].sum()) for k in ("nodes", "history", "completed", "rejected", "unfinished",
                                                   "cancelled", "skipped", "unsent")},
        "makespan_s": describe(mk[done]),
        "final_ttft_s": describe(ttft_final[done & ~np.isnan(ttft_final)]),
        "slowdown": describe(slow[done & ~np.isnan(slow)]),
        "peak_fanout": int(rows["peak_fanout"].max(initial=0)),
        "prefix_reuse": int(rows["cached_tokens"].sum()) / inp if inp else None,
        "ideal_prefix_reuse": int(rows["ideal_cached_tokens"].sum()) / inp if inp else None,
        "ttft_first_turn_s": describe(ttft[ok & (turn == 0)]),
        "ttft_later_turns_s": describe(ttft[ok & (turn > 0)]),
        "critical_path_share": {p: (v / total if total > 0 else None) for p, v in path.items()},
        **({"phases": phases_summary(driver, rec)} if driver.phased else {}),
    }


def phases_summary(driver: "AgenticDriver", rec: RequestRecorder) -> dict:
    """The agentic block's ``phases``: the warm-up's requests, when measurement started, and
    the profile's window (cutoff, grace, drain) with what it cut short."""
    phase = np.asarray(driver.req_phase, dtype=np.int8)
    out: dict = {
        "snapshot_lanes": len(driver.snapshot_fractions) if driver.snapshot_fractions is not None else 0,
        "history_nodes": int(sum(run.history for run in driver.runs)),
        "primers": int((phase == PRIMER).sum()),
        "lane_warmups": int((phase == LANE_WARMUP).sum()),
        "measure_start_s": driver.measure_start,
    }
    w = driver.window
    if w is not None:
        cancelled = [r for r in w.cancelled if int(rec.column("status")[r]) == int(Status.CANCELLED)]
        last = max((float(rec.column("finish")[r]) for r in w.cancelled), default=math.nan)
        out.update({"admission_cutoff_s": w.cutoff, "grace_deadline_s": w.grace_deadline,
                    "drain_deadline_s": None if math.isnan(w.drain_deadline) else w.drain_deadline,
                    "cancelled_at_grace": len(cancelled), "not_issued_after_cutoff": w.not_issued,
                    "drain_timed_out": bool(last > w.drain_deadline) if w.cancelled else False})
    return out
