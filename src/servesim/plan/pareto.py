"""Pareto fronts and the chosen deployment among a sweep's candidates."""

from __future__ import annotations

import math
from typing import Any, Sequence


def _ok(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def pareto_front(rows: Sequence[dict], axes: Sequence[tuple[str, str]]) -> list[bool]:
    """Whether each row is on the front of ``axes`` ([(metric, "max"|"min")]) among ``ok`` rows
    with every axis defined: no other such row is at least as good on every axis and better on one."""
    def vec(r: dict) -> tuple[float, ...] | None:
        if r.get("status") != "ok" or not all(_ok(r.get(m)) for m, _ in axes):
            return None
        return tuple(float(r[m]) if d == "max" else -float(r[m]) for m, d in axes)

    pts = [vec(r) for r in rows]
    out = []
    for i, p in enumerate(pts):
        if p is None:
            out.append(False)
            continue
        dominated = any(q is not None and j != i and all(a >= b for a, b in zip(q, p)) and q != p
                        for j, q in enumerate(pts))
        out.append(not dominated)
    return out


#: The two fronts a sweep marks: throughput per GPU against what one user sees, and
#: what one user sees against the price of a token.
THROUGHPUT_FRONT = (("throughput_per_gpu_tok_s", "max"), ("per_user_tok_s", "max"))
COST_FRONT = (("per_user_tok_s", "max"), ("cost_per_mtok_usd", "min"))


def meets_sla(row: dict, require_slo: bool) -> bool:
    """A candidate that ran, is not overloaded and (when required) meets every SLO objective."""
    if row.get("status") != "ok" or row.get("overloaded"):
        return False
    return bool(row.get("slo_met")) if require_slo else True


def choose(rows: Sequence[dict], by: str, require_slo: bool) -> dict | None:
    """The cheapest ($/hour; ``by="cost"``) or smallest (GPUs; ``by="gpus"``) candidate meeting
    the SLA; ties go to the higher goodput (output tokens/s), then the lower candidate id.
    Candidates without a price fall back to GPUs when ``by="cost"`` cannot compare them."""
    fit = [r for r in rows if meets_sla(r, require_slo)]
    if not fit:
        return None
    priced = all(_ok(r.get("cost_per_hour_usd")) for r in fit)
    key_name = "cost_per_hour_usd" if by == "cost" and priced else "gpus"

    def key(r: dict):
        good = r.get("goodput_tok_s") if _ok(r.get("goodput_tok_s")) else r.get("output_tok_s") or 0.0
        return (float(r[key_name]), -float(good), int(r["candidate"]))

    return min(fit, key=key)
