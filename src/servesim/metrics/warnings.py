"""The summary's warning lines: choices a run made on the user's behalf, said out loud.

A run never adapts the input silently: every such choice is counted in prediction.json
(``summary.requests.output_cut_at_context``, ``summary.workload``) and announced by one line
here, shown under the console summary and listed in ``summary.warnings``.
"""

from __future__ import annotations


def input_warnings(summary: dict, workload_counts: dict[str, int], deployment_notes: list[str]) -> list[str]:
    """Warning lines for what the workload and deployment made the run do differently from
    what the input literally asked."""
    out = list(deployment_notes)
    blank = workload_counts.get("blank_lines", 0)
    if blank:
        out.append(f"workload: {blank:,} blank line{'s' if blank != 1 else ''} in the trace skipped")
    cut = summary["requests"].get("output_cut_at_context", 0)
    if cut:
        out.append(f"{cut:,} completed request{'s' if cut != 1 else ''} generated fewer tokens than "
                   "output_length: the prompt plus the output exceed the engine's context length, and "
                   "the engine stops there (requests.parquet: generated_tokens, reason)")
    return out
