"""A worker: one engine plus the step-time model that prices its passes.

The worker runs one pass at a time.  In fast mode a decode-only pass that the engine
proves will repeat unchanged is extended to a *stretch* of passes, priced in one
vectorised call; the stretch is committed lazily and cut short as soon as something
reaches the worker (an arrival), so results equal pass-by-pass simulation.
"""

from __future__ import annotations

import numpy as np

from servesim.engines.base import Engine
from servesim.perf.plan import PassPlan, StepTimeModel, plan_stretch_times


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
        self.busy = False
        #: The pass (or stretch of identical decode passes) in flight.
        self.plan: PassPlan | None = None
        self.ends: np.ndarray = np.zeros(0)
        self.start: float = 0.0
        #: Increments whenever the pending end event is superseded.
        self.epoch = 0
        self.busy_time = 0.0
        self.passes = 0
        self.tokens = 0
        self.last_pass_tokens = 0

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
        if self.fast_forward and plan.is_decode_only:
            steps = self.engine.decode_stretch_limit()
        if steps > 1:
            durations = plan_stretch_times(self.step_time, plan, steps)  # attention-DP plans keep their ranks
            ends = now + np.cumsum(durations)
        else:
            ends = np.array([now + pass_seconds(self.step_time, plan)])
        self.plan, self.ends, self.start, self.busy = plan, ends, now, True
        return float(ends[-1])

    def truncate(self, t: float) -> float | None:
        """Something reaches the worker at ``t``: stop the stretch after the pass in flight.

        Returns the new end time if it changed (the caller re-posts the end event).
        """
        if not self.busy or self.ends.size <= 1:
            return None
        keep = int(np.searchsorted(self.ends, t, side="left")) + 1
        if keep >= self.ends.size:
            return None
        self.ends = self.ends[:keep]
        self.epoch += 1
        return float(self.ends[-1])

    def close_at(self, t: float) -> None:
        """The run stops at ``t`` (the time limit) while this worker may be busy.

        Commits the passes of the stretch in flight that ended by ``t``: a stretch is committed
        only at its end, so without this the fast mode would drop passes the step mode commits.
        The pass still running at ``t`` counts as busy time up to ``t`` and is not committed.
        """
        if not self.busy:
            return
        start = self.start
        done = int(np.searchsorted(self.ends, t, side="right"))
        if done:
            self.ends = self.ends[:done]
            start = self.finish_pass()
        self.busy_time += t - start
        self.busy = False

    def finish_pass(self) -> float:
        """Commit the pass or stretch in flight; returns its end time."""
        plan = self.plan
        assert plan is not None
        ends = self.ends
        end = float(ends[-1])
        n = ends.size
        self.busy_time += end - self.start
        self.passes += n
        self.last_pass_tokens = tokens = plan.num_tokens
        self.tokens += tokens * n
        if n == 1:
            self.engine.complete(plan, end)
        else:
            self.engine.complete_stretch(plan, ends)
        self.plan = None
        self.busy = False
        return end
