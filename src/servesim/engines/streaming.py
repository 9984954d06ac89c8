"""When a streaming client sees a request's first chunk, where the engine sends tokens in chunks.

An engine that streams a request's tokens every ``k + 1`` decoding iterations, the first chunk
included (TensorRT-LLM's ``stream_interval`` without postprocess workers,
:class:`servesim.engines.trtllm.options.TRTLLMOptions`), delivers the first token with the
request's ``(k + 1)``-th iteration: the client's TTFT is ``k`` of that request's own decoding
iterations later than the token's sampling, and tokens 1 .. k + 1 arrive together.  The
engine's last token is sent when the request finishes, so its end-to-end latency is unchanged
and the benchmark's TPOT, (E2E − TTFT) / (output − 1), comes out correspondingly smaller.

The run records each request's first, second and last token times and its emissions (one per
decoding iteration, a speculative step's accepted tokens included), not every token's; the
delay is ``k`` times the request's mean iteration gap, ``(last − first) / (emissions − 1)``, never
past its last token: exact when its iterations are evenly spaced, as in steady decoding.
"""

from __future__ import annotations

import numpy as np


def delay_first_chunk(recorder, iters: int) -> None:
    """Move every request's first (and, where earlier, second) token time ``iters`` of its own
    decoding iterations later, capped at its last token (once, after the run, before the
    frontend's stream latency)."""
    if iters <= 0:
        return
    first = recorder.column("first_token")
    second = recorder.column("second_token")
    last = recorder.column("last_token")
    em = recorder.column("emissions").astype(float)
    ok = ~np.isnan(first) & ~np.isnan(last) & (em > 1)
    if not ok.any():
        return
    gap = np.zeros(first.size)
    gap[ok] = (last[ok] - first[ok]) / (em[ok] - 1)
    new_first = np.where(ok, np.minimum(first + iters * gap, last), first)
    first[:] = new_first
    has_second = ~np.isnan(second)
    second[has_second] = np.maximum(second[has_second], new_first[has_second])
