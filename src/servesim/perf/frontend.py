"""The non-GPU stages a benchmark client measures (DESIGN.md, "What a measured number contains").

A measured TTFT is not just the prefill passes.  Before a request reaches the engine's
scheduler it crosses the HTTP server and is tokenized, usually serially in one API-server
process; after the engine emits a token, it is detokenized and streamed back.  A measured
TPOT also carries the scheduler's CPU work per pass unless the engine overlaps it with the
GPU (async scheduling).  This module models those stages with named parameters that
calibration fits, instead of folding them into GPU efficiency:

- :meth:`Frontend.admit_time`: a serial FIFO tokenizer queue (one server).  A request sent at
  ``t`` waits for the tokenizer to be free, takes
  ``tokenize_base_s + tokenize_per_token_s × input_length`` and reaches the engine
  ``request_overhead_s`` later.  When a closed-loop client releases ``concurrency``
  requests at once, the last one waits behind all the others: TTFT grows with concurrency.
- :meth:`Frontend.apply_stream_latency`: the client sees every token
  ``first_token_overhead_s`` after the engine emitted it (detokenization, HTTP streaming);
  TTFT and end-to-end latency grow by that constant, TPOT does not change.  On top of it,
  ``stream_per_running_s`` for every request decoding when the request's first token came out:
  the API server and the client handle a pass's outputs one request after another (vLLM lists
  the running requests before the newly scheduled ones), so a request that joins a large batch
  sees its tokens later by its place in that order.  Held for the request's lifetime, it shifts
  TTFT and end-to-end latency, not TPOT (:func:`running_at_first_token`).  The bundled
  calibrations put it at up to 2 ms per request (0.5-0.6 ms shared; since it is fitted per
  model, the 2 ms bound for 11-13 SGLang model groups, mostly DeepSeek, whose measured mean TTFT
  carries a tail; about 0 for one or two), more than output handling alone costs (about
  0.1 ms): fitted, it also carries the rest of the measured growth of TTFT with concurrency that
  the engine models do not produce (docs/validation.md).  Like the constant, it is applied after the run, so it
  does not hold a closed-loop client's slot or delay a session's next turn.
- :class:`SchedulerOverheadStepTime`: wraps a step-time model and adds
  ``scheduler_pass_s + scheduler_per_request_s × requests`` of CPU time to each pass
  (with attention data parallelism, the busiest rank's requests: each rank has its own
  scheduler), unless ``async_scheduling`` hides it behind the GPU.  An engine whose event loop
  prepares the next pass while the GPU runs this one (SGLang's overlap scheduler, vLLM's async
  scheduling: the engine plan's ``overlaps_host``) pays the longer of the two instead of their sum: its CPU time shows
  only where it exceeds the GPU's, as on a small model's short passes.

All times are seconds.  ``Frontend()`` uses typical defaults; ``Frontend.disabled()`` is
exactly zero (the engine-only view, identical to a run without a frontend).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from servesim.perf.plan import PassPlan, StepTimeModel, ends_from_durations, plan_stretch_times


class FrontendParams(BaseModel):
    """Named, calibratable constants of the frontend (API server, tokenizer, streaming)."""

    model_config = ConfigDict(extra="forbid")

    request_overhead_s: float = Field(2e-3, ge=0, description="HTTP request parse + hand-off to the engine, per request")
    tokenize_base_s: float = Field(1e-3, ge=0, description="serial tokenizer cost per request (fixed part)")
    tokenize_per_token_s: float = Field(1.5e-6, ge=0, description="serial tokenizer cost per prompt token")
    first_token_overhead_s: float = Field(
        20e-3, ge=0, description="detokenize + stream latency the client sees on every token (so on TTFT and e2e)")
    stream_per_running_s: float = Field(
        0.0, ge=0, description="extra stream latency of a request per request decoding when its first token came out "
                               "(outputs of a pass are streamed one request after another)")
    scheduler_pass_s: float = Field(0.0, ge=0, description="scheduler CPU time per pass not overlapped with the GPU")
    scheduler_per_request_s: float = Field(0.0, ge=0, description="scheduler CPU time per request in the pass")
    async_scheduling: bool = Field(False, description="the engine overlaps scheduling with the GPU pass")

    @classmethod
    def zero(cls) -> "FrontendParams":
        return cls(request_overhead_s=0.0, tokenize_base_s=0.0, tokenize_per_token_s=0.0,
                   first_token_overhead_s=0.0, stream_per_running_s=0.0, scheduler_pass_s=0.0,
                   scheduler_per_request_s=0.0)


#: Parameters calibration may fit (the rest are switches).
FRONTEND_FIT_FIELDS = ("request_overhead_s", "tokenize_base_s", "tokenize_per_token_s", "first_token_overhead_s",
                       "stream_per_running_s", "scheduler_pass_s", "scheduler_per_request_s")


class Frontend:
    """The API server in front of one deployment: a serial tokenizer queue and stream latency.

    Stateful (the tokenizer's busy-until time): make one per simulation run.
    """

    def __init__(self, params: FrontendParams | dict | None = None) -> None:
        if params is None:
            params = FrontendParams()
        elif isinstance(params, dict):
            params = FrontendParams.model_validate(params)
        self.p = params
        self._free_at = 0.0  # when the (single) tokenizer is next idle
        # Read per request by admit_time: kept as plain floats (typed when compiled).
        self._tokenize_base_s = float(params.tokenize_base_s)
        self._tokenize_per_token_s = float(params.tokenize_per_token_s)
        self._request_overhead_s = float(params.request_overhead_s)

    @classmethod
    def disabled(cls) -> "Frontend":
        return cls(FrontendParams.zero())

    @property
    def is_zero(self) -> bool:
        p = self.p
        return not (p.request_overhead_s or p.tokenize_base_s or p.tokenize_per_token_s or p.first_token_overhead_s
                    or p.stream_per_running_s)

    def tokenize_seconds(self, input_length: int) -> float:
        return self._tokenize_base_s + self._tokenize_per_token_s * input_length

    def admit_time(self, req, now: float) -> float:
        """When a request the client sent at ``now`` reaches the engine.

        Calls must come in send order (the simulation's event order); ties are FIFO.
        """
        start = now if now > self._free_at else self._free_at
        self._free_at = start + self.tokenize_seconds(req.input_length)
        return self._free_at + self._request_overhead_s

    def apply_stream_latency(self, recorder) -> None:
        """Shift every client-observed token time by ``first_token_overhead_s`` plus
        ``stream_per_running_s`` × the requests decoding at the request's first token (once,
        after the run; each request's tokens move together, so its inter-token gaps stay)."""
        d = self.p.first_token_overhead_s
        per_running = self.p.stream_per_running_s
        if not d and not per_running:
            return
        has_tok = ~np.isnan(recorder.column("first_token"))
        shift = np.full(has_tok.size, float(d))
        if per_running:
            shift += per_running * np.nan_to_num(running_at_first_token(recorder))
        for name in ("first_token", "second_token", "last_token"):
            recorder.column(name)[:] += shift  # NaN stays NaN
        fin = recorder.column("finish")
        fin[has_tok] += shift[has_tok]

    def wrap_step_time(self, model: StepTimeModel, overlapped: bool = False) -> StepTimeModel:
        """The step-time model plus the scheduler's per-pass CPU time (unless async); with
        ``overlapped`` (the engine prepares a pass while the previous one runs), the longer of
        the GPU's and the CPU's time per pass."""
        p = self.p
        if p.async_scheduling or (p.scheduler_pass_s == 0 and p.scheduler_per_request_s == 0):
            return model
        return SchedulerOverheadStepTime(model, p.scheduler_pass_s, p.scheduler_per_request_s, overlapped)


def running_at_first_token(recorder) -> np.ndarray:
    """Per request, how many requests of its worker were in the pass that emitted its first
    token: those that had their first token before it and their last not before it, plus the
    request itself.  NaN for a request that never got a token.

    The worker is the one that streams the request's tokens: in a disaggregated deployment its
    decode worker (``decode_worker``; a request that never reached one keeps its prefill
    worker).  Warm-up requests count (they fill batches too), and so does a request that was
    retracted between its first and last token (an approximation: it was not in every pass).
    Meant for the engine's token times: :meth:`Frontend.apply_stream_latency` counts before it
    shifts them, and the base runs of the sensitivity fit carry no stream latency.
    """
    first = recorder.column("first_token")
    last = recorder.column("last_token")
    worker = recorder.column("worker")
    if "decode_worker" in getattr(recorder, "extra_columns", {}):
        decode = recorder.column("decode_worker")
        worker = np.where(decode >= 0, decode, worker)
    out = np.full(first.size, np.nan)
    has_tok = np.flatnonzero(~np.isnan(first))
    # one sort by worker, then each worker's slice: O(n log n) however many workers
    order = has_tok[np.argsort(worker[has_tok], kind="stable")]
    _, starts_at = np.unique(worker[order], return_index=True)
    for mine in np.split(order, starts_at[1:]):
        t = first[mine]
        starts = np.sort(t)
        ends = np.sort(np.where(np.isnan(last[mine]), np.inf, last[mine]))
        # started strictly before t, minus ended strictly before t: running through t
        out[mine] = np.searchsorted(starts, t, side="left") - np.searchsorted(ends, t, side="left") + 1.0
    return out


def scheduled_requests(plan: PassPlan) -> int:
    """Requests one scheduler handles in ``plan``: with attention data parallelism each rank has
    its own scheduler process working in parallel, so the busiest rank's count."""
    if plan.ranks is not None:
        return max((r.prefill_new.size + r.decode_ctx.size for r in plan.ranks if r is not None), default=0)
    return plan.prefill_new.size + plan.decode_ctx.size


class SchedulerOverheadStepTime:
    """A step-time model plus the scheduler's CPU time per pass (and per request in it): added
    serially, or, ``overlapped``, the longer of the pass's GPU time and that CPU time (the CPU
    prepares each pass while the GPU runs the one before).

    It offers the step-time methods the worker calls (the optional ones it finds on the class:
    ``decode_stretch_ends``, ``stretch_pricer``, ``rank_stretch_times``) and nothing else: the
    wrapped model's own diagnostics are read on :attr:`inner`.
    """

    def __init__(self, inner: StepTimeModel, pass_s: float, per_request_s: float, overlapped: bool = False) -> None:
        self.inner = inner
        self.pass_s = pass_s
        self.per_request_s = per_request_s
        self.overlapped = overlapped

    def pass_time(self, plan: PassPlan) -> float:
        gpu = self.inner.pass_time(plan)
        if self.overlapped:
            cpu = self.pass_s + self.per_request_s * scheduled_requests(plan)
            return gpu if gpu >= cpu else cpu
        return gpu + self.pass_s + self.per_request_s * scheduled_requests(plan)

    def _with_host(self, durations: np.ndarray, extra: float) -> np.ndarray:
        """The passes' ``durations`` (a new array, changed in place) with ``extra`` seconds of
        scheduler CPU time each."""
        if self.overlapped:
            return np.maximum(durations, extra, out=durations)
        durations += extra
        return durations

    def decode_stretch_times(self, decode_ctx: np.ndarray, steps: int) -> np.ndarray:
        extra = self.pass_s + self.per_request_s * decode_ctx.size
        return self._with_host(self.inner.decode_stretch_times(decode_ctx, steps), extra)

    def decode_stretch_ends(self, decode_ctx: np.ndarray, steps: int, now: float) -> np.ndarray:
        """End times of :meth:`decode_stretch_times`'s passes from ``now`` (see
        :func:`servesim.perf.plan.plan_stretch_ends`): fused into the analytic model's call
        when it is the wrapped model, else summed here."""
        extra = self.pass_s + self.per_request_s * decode_ctx.size
        if getattr(type(self.inner), "fuses_overhead_into_ends", False):
            return self.inner.decode_stretch_ends(decode_ctx, steps, now, extra, self.overlapped)
        return ends_from_durations(self.decode_stretch_times(decode_ctx, steps), now)

    def stretch_pricer(self):
        """The wrapped model's compiled stretch pricer with this overhead fused in, if it has one
        (see :func:`servesim.perf.plan.stretch_pricer`)."""
        if not getattr(type(self.inner), "fuses_overhead_into_ends", False):
            return None
        return self.inner.stretch_pricer(self.pass_s, self.per_request_s, self.overlapped)

    def rank_stretch_times(self, plan: PassPlan, steps: int) -> np.ndarray:
        """Attention-DP decode stretches (see :func:`servesim.perf.plan.plan_stretch_times`)."""
        extra = self.pass_s + self.per_request_s * scheduled_requests(plan)
        return self._with_host(np.array(plan_stretch_times(self.inner, plan, steps), dtype=np.float64), extra)
