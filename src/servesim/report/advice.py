"""What to change when requests end badly: the config key behind each rejection reason.

A run in which many requests were rejected shows latencies over the survivors only, which can
make a deployment look better than one that served everything.  The console and the HTML
report lead with a warning built here: how many requests ended rejected or unfinished, why
(the engine's own reason text), and the key that removes the cause.
"""

from __future__ import annotations

import re

#: (pattern of an engine's rejection reason, what to change).  Reasons come from
#: engines/sglang.py, vllm.py, trtllm.py and the simulation's time limit.
_FIXES: tuple[tuple[str, str], ...] = (
    (r"max_num_tokens .* chunked context off",
     "set deployment.engine.enable_chunked_context=true, or raise deployment.engine.max_num_tokens"),
    (r"max_seq_len", "raise deployment.engine.max_seq_len (up to the model's context length)"),
    (r"max_model_len", "raise deployment.engine.max_model_len (up to the model's context length)"),
    (r"maximum input length", "raise deployment.engine.context_length (up to the model's context length)"),
    (r"exceeds the KV cache",
     "give the KV cache more room: deployment.tp, a GPU with more memory (deployment.gpu), "
     "deployment.kv_dtype=fp8, or the engine's memory fraction (deployment.engine.mem_fraction_static / "
     "gpu_memory_utilization / free_gpu_memory_fraction)"),
    (r"not arrived before the simulation time limit", "raise simulation.max_sim_time_s"),
    (r"simulation time limit", "raise simulation.max_sim_time_s, or lower the load (workload rate or speedup)"),
)


def fix_for(reason: str) -> str | None:
    """The change that removes ``reason``, or None when none is known."""
    for pattern, fix in _FIXES:
        if re.search(pattern, reason):
            return fix
    return None


def request_warnings(summary: dict) -> list[str]:
    """One line per reason of rejected and unfinished requests, most frequent first:
    ``"45.2% of requests rejected (5,437 of 12,031): <reason>. Fix: <change>."``."""
    req = summary["requests"]
    total = max(int(req["total"]), 1)
    lines = []
    for status, key in (("rejected", "rejected_by_reason"), ("unfinished", "unfinished_by_reason")):
        for reason, n in sorted(req.get(key, {}).items(), key=lambda kv: -kv[1]):
            fix = fix_for(reason)
            lines.append(f"{n / total * 100:.1f}% of requests {status} ({n:,} of {req['total']:,}): {reason}."
                         + (f" Fix: {fix}." if fix else ""))
    if lines and req.get("completed"):
        lines.append("Latency and throughput figures cover completed requests only.")
    return lines


def run_alerts(summary: dict) -> list[str]:
    """What a reader must see before any figure, most serious first: the overload or saturation
    sentence (plan/overload.py), then :func:`request_warnings`.  The summary keeps them as
    ``alerts``; the console and the HTML report lead with them."""
    from servesim.plan.overload import overload_message, saturation_message

    block = summary.get("overload") or {}
    return [m for m in (overload_message(block), saturation_message(block)) if m] + request_warnings(summary)
