"""SGLang's overlap scheduler: each pass is decided while the previous one is still on the GPU.

SGLang runs ``event_loop_overlap`` unless ``--disable-overlap-schedule`` is given (or the
server turns it off: speculative decoding without spec v2, pipeline parallelism).  One
iteration of that loop (``managers/scheduler.py``, SGLang 0.5.x) does, in order:

1. pull the requests the tokenizer manager has sent (``recv_requests``);
2. choose the next batch from the queue and the running batch *as the CPU knows them*;
3. launch it (asynchronously: the GPU runs it after the batch it is still running);
4. process the result of the previous batch: wait for it to finish, emit its tokens, finish
   requests, free their KV.

So the batch that starts when pass ``k`` ends was chosen during step 2 of the iteration that
began when pass ``k - 1`` ended, i.e. when pass ``k`` started.  Two consequences for latency,
both modelled here and in ``engines/sglang.py``:

* **Arrivals wait one more pass.**  A request that reaches the scheduler while pass ``k`` runs
  is pulled only by the iteration that starts when pass ``k`` ends, which chooses pass
  ``k + 2``: it is prefilled after pass ``k + 1`` (usually a decode pass), not right after
  pass ``k`` as a normal loop would.  A scheduler with nothing in flight spins through
  iterations and takes a request at once.
* **Finishes are known one pass late.**  Requests whose last token pass ``k`` samples are
  still in the running batch when pass ``k + 1`` is chosen, so they decode once more and the
  token is thrown away.  When they were the whole running batch, that wasted pass (a
  *ghost* pass here) still occupies the GPU, and a request arriving meanwhile waits for it:
  at concurrency 1 a closed-loop client's next request starts after one more decode pass.
  Within a running batch that keeps other requests, the extra rows are left out (one row
  for one pass; their pages are freed when the finish is processed, as modelled).

A batch the stale view finds nothing for is empty in the real loop too; that iteration then
processes the previous result, and the next one pulls again right away: the model pulls
everything that has arrived and decides again.  With DP attention every rank runs in
lock-step (an idle rank joins with an idle batch), so an idle rank's pulls follow the same
cadence (:meth:`OverlapLag.joined_idle`); only when no rank has a batch does every rank spin.
"""

from __future__ import annotations

import math

import numpy as np


class OverlapLag:
    """What the overlap loop of one SGLang scheduler has seen: the cut-off of its next pull.

    Compiled from this source (``overlap.pxd``): the scheduler asks it about every pass.
    """

    __slots__ = ("decided_at", "last_end", "ghost_ctx")

    def __init__(self) -> None:
        #: When the pass that ends next (or just ended) started: the iteration that chose the
        #: following pass pulled arrivals up to then.  ``inf``: nothing is in flight.
        self.decided_at = math.inf
        #: End of the last pass this scheduler committed (``inf`` while it idles in lock-step).
        self.last_end = -math.inf
        #: Contexts of the requests the last pass finished when they emptied the running batch:
        #: the next pass decodes them once more (a ghost pass).  None otherwise.
        self.ghost_ctx: np.ndarray | None = None

    def cutoff(self, now: float) -> float:
        """Arrival time up to which a pull at ``now`` sees requests.

        Right at the end of a pass, the pass being chosen was chosen when that pass started;
        after an idle gap (``now`` past the last pass end) the spinning loop sees everything.
        """
        if now > self.last_end:
            return now
        return min(self.decided_at, now)

    def spins(self) -> bool:
        """Whether a loop that chose no batch would spin to a fresh pull now: not with a ghost
        pass to run, nor while in lock-step with other DP ranks (it ran an idle batch)."""
        return self.ghost_ctx is None and self.last_end != math.inf

    def decided(self, now: float, launched: bool) -> None:
        """A pass was chosen at ``now`` (``launched``), or none: the loop idles."""
        self.decided_at = now if launched else math.inf
        self.ghost_ctx = None

    def ended(self, end: float, last_start: float | None = None) -> None:
        """A pass (or a stretch of passes whose last one started at ``last_start``) ended."""
        self.last_end = end
        if last_start is not None:
            self.decided_at = last_start

    def joined_idle(self, now: float) -> None:
        """DP attention: this rank has no batch but joins the pass other ranks start at ``now``."""
        self.decided_at = now
        self.last_end = math.inf
