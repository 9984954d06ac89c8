"""A worker: one engine plus the step-time model that prices its passes.

The worker runs one pass at a time.  In fast mode a decode-only pass that the engine
proves will repeat unchanged is extended to a *stretch* of passes, priced in one
vectorised call; the stretch is committed lazily and cut short as soon as something
reaches the worker (an arrival), so results equal pass-by-pass simulation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.engines.base import Engine
from servesim.perf.plan import PassPlan, StepTimeModel, plan_stretch_ends, stretch_pricer

if TYPE_CHECKING:
    import numpy as np

    from servesim.metrics.timeseries import TimeSeries


def pass_seconds(step_time: StepTimeModel, plan: PassPlan) -> float:
    """The pass's duration: the step-time model's price plus any host-tier KV load.

    A load the engine overlaps with compute (SGLang HiCache loads layer by layer) hides
    behind it: max(compute, load); otherwise the pass waits for it: compute + load.
    """
    t = step_time.pass_time(plan)
    load = plan.host_load_s
    if load:
        t = max(t, load) if plan.host_load_overlap else t + load
    return t


class Worker:
    """Drives one engine on the virtual clock."""

    def __init__(self, worker_id: int, engine: Engine, step_time: StepTimeModel, gpus: int,
                 fast_forward: bool = True) -> None:
        self.worker_id = worker_id
        self.engine = engine
        self.step_time = step_time
        self.gpus = gpus
        self.fast_forward = fast_forward
        #: The step-time model's prepared stretch pricing, if it has one (plans without ranks).
        self.stretch_ends = stretch_pricer(step_time) if fast_forward else None
        #: Consecutive stretches priced and held as one (engines with ``decode_stretch_plan``,
        #: a pricer with ``stretches``): the engine's plan, the pricer's method, or None.
        self.stretch_plan = getattr(engine, "decode_stretch_plan", None)
        self.stretches = getattr(self.stretch_ends, "stretches", None)
        #: For consecutive stretches in flight: a flag per pass, 1 where one starts (else None).
        self.starts = None
        self.busy = False
        #: The pass (or stretch of identical decode passes) in flight: its number of passes,
        #: the end of the last one and, for a stretch, every pass's end (None for one pass,
        #: which then needs no array).
        self.plan: PassPlan | None = None
        self.n_passes = 0
        self.end = 0.0
        self.ends: np.ndarray | None = None
        self.start: float = 0.0
        #: Increments whenever the pending end event is superseded.
        self.epoch = 0
        #: When input (an arrival) cut the stretch in flight short; None if it did not.
        self.cut_at: float | None = None
        #: Whether something reads this worker's state mid-stretch (:meth:`settle`); then
        #: input settles the stretch before cutting it, see :meth:`truncate`.
        self.settle_on_input = False
        #: The run's time series, if any: a stretch ends at the pass end it samples next.
        self.timeseries: "TimeSeries | None" = None
        self.busy_time = 0.0
        self.passes = 0
        self.tokens = 0
        self.last_pass_tokens = 0
        #: Passes after the one in flight that input cannot change: an engine that chose its
        #: next pass before the current one started (SGLang's overlap loop) still runs it.
        self.input_lag = int(engine.input_lag_passes())

    def start_pass(self, now: float) -> float | None:
        """Schedule the next pass at ``now``; returns its end time, or None if idle.

        A stretch may be planned far ahead: whatever reaches the worker later cuts it
        back with :meth:`truncate`, and nothing of it is committed before it ends.
        """
        plan = self.engine.schedule(now)
        if plan is None:
            self.busy = False
            return None
        steps = 1
        starts = None
        if self.fast_forward and plan.decode_only():
            # Consecutive stretches as one where nothing reads the state mid-stretch (a settle
            # expects one stretch); an input cuts them as it cuts one (:meth:`truncate`).
            if (self.stretch_plan is not None and self.stretches is not None and plan.ranks is None
                    and not self.settle_on_input):
                steps, starts = self.stretch_plan()
            else:
                steps = self.engine.decode_stretch_limit()
        if steps > 1:
            if starts is not None:
                ends = self.stretches(plan.decode_ctx, steps, now, starts)
            elif self.stretch_ends is not None and plan.ranks is None:
                ends = self.stretch_ends(plan.decode_ctx, steps, now)
            else:  # attention-DP plans keep their ranks
                ends = plan_stretch_ends(self.step_time, plan, steps, now)
            if self.timeseries is not None:
                ends = ends[:self.timeseries.passes_to_sample(self.worker_id, ends)]
            self._hold(ends)
        else:
            self.ends = None
            self.n_passes = 1
            self.end = now + pass_seconds(self.step_time, plan)
        self.plan, self.start, self.busy = plan, now, True
        self.starts = starts
        self.cut_at = None
        return self.end

    def _hold(self, ends: np.ndarray) -> None:
        """The stretch in flight has passes ending at ``ends``."""
        self.ends = ends
        self.n_passes = ends.size
        self.end = float(ends[-1])

    def _keep_first(self, k: int) -> None:
        """Cut the stretch in flight to its first ``k`` passes."""
        self._hold(self.ends[:k])

    def truncate(self, t: float) -> float | None:
        """Something reaches the worker at ``t``: stop the stretch after the pass in flight (and
        the ``input_lag`` passes after it, which the engine chose before ``t``).

        Returns the new end time if it changed (the caller re-posts the end event).  With
        ``settle_on_input`` the passes ended by ``t`` are committed first: the engine is about to
        receive the input, and a later :meth:`settle` must not schedule a pass before ``t`` that
        sees it.
        """
        if self.settle_on_input:
            self.settle(t)  # if this leaves the worker idle, the caller restarts it (it always does)
        if not self.busy or self.n_passes <= 1:
            return None
        # The passes ended before t and the one in flight (searchsorted: bisect on an array
        # makes a numpy scalar per probe).
        keep = int(self.ends.searchsorted(t)) + 1
        if not self.settle_on_input:  # (settled workers keep one pass, as :meth:`settle` expects)
            keep += self.input_lag
        if keep >= self.n_passes:
            return None
        self._keep_first(keep)
        self.epoch += 1
        self.cut_at = t
        return self.end

    def settle(self, t: float) -> bool:
        """Bring the engine's state up to ``t`` before someone reads it (a load-aware router).

        A stretch is committed only at its end, so mid-stretch the engine still shows the state
        of the stretch's start.  Pass-by-pass simulation would by ``t`` have committed every
        pass that ended by then and scheduled the next; this does the same: it commits those
        passes, and schedules the next at the last one's end, keeping the rest of the stretch
        (the pending end event stays valid).  If the last committed pass ended exactly at ``t``
        the next one is not scheduled: pass-by-pass, it is decided after the events of the
        instant.  Returns True then (the caller must start the worker again).
        """
        if not self.busy or self.n_passes <= 1:
            return False
        ends = self.ends
        done = int(ends.searchsorted(t, side="right"))
        if done == 0 or done == self.n_passes:  # nothing ended yet / the end event is due now
            return False
        if self.cut_at is not None:
            # The engine already holds the input that cut the stretch at ``cut_at``; scheduling
            # the rest at an earlier pass end would let it act on that input too early.
            raise AssertionError(f"worker {self.worker_id}: settled at t={t} after input cut its stretch "
                                 f"at t={self.cut_at} unsettled")
        rest = ends[done:]
        self._keep_first(done)
        end = self.finish_pass()
        if end == t:
            self.epoch += 1  # the stretch's end event is void: the worker restarts after this instant
            return True
        plan = self.engine.schedule(end)
        if plan is None or not plan.decode_only() or self.engine.decode_stretch_limit() < rest.size:
            raise AssertionError(f"worker {self.worker_id}: a decode stretch changed when settled at t={t}")
        self.plan, self.start, self.busy = plan, end, True
        self._hold(rest)
        return False

    def close_at(self, t: float) -> None:
        """The run stops at ``t`` (the time limit) while this worker may be busy.

        Commits the passes of the stretch in flight that ended by ``t``: a stretch is committed
        only at its end, so without this the fast mode would drop passes the step mode commits.
        The pass still running at ``t`` counts as busy time up to ``t`` and is not committed.
        """
        if not self.busy:
            return
        start = self.start
        if self.ends is None:
            done = 1 if self.end <= t else 0
        else:
            done = int(self.ends.searchsorted(t, side="right"))
        if done:
            if done < self.n_passes:
                self._keep_first(done)
            start = self.finish_pass()
        self.busy_time += t - start
        self.busy = False

    def finish_pass(self) -> float:
        """Commit the pass or stretch in flight; returns its end time."""
        plan = self.plan
        assert plan is not None
        end = self.end
        n = self.n_passes
        starts = self.starts
        if starts is not None and n > 1:  # consecutive stretches: busy time added stretch by stretch
            start = self.start
            ends = self.ends
            for s in range(1, n):
                if starts[s]:
                    t = ends.item(s - 1)
                    self.busy_time += t - start
                    start = t
            self.busy_time += end - start
        else:
            self.busy_time += end - self.start
        self.starts = None
        self.passes += n
        self.last_pass_tokens = tokens = plan.token_count()
        self.tokens += tokens * n
        if n == 1:
            self.engine.complete(plan, end)
        else:
            self.engine.complete_stretch(plan, self.ends)
        self.plan = None
        self.busy = False
        return end
