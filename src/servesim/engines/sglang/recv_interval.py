"""SGLang's ``--scheduler-recv-interval``: the scheduler polls for new requests only now and then.

SGLang's scheduler loop starts each iteration by pulling newly tokenized requests from the
tokenizer's socket.  With ``scheduler_recv_interval`` > 1 it skips that pull unless a
counter has reached the interval (``managers/scheduler_recv_skipper.py``, SGLang 0.5.x):
before each iteration the counter grows by a weight of the batch the previous iteration
ran — 1 for a decode (or speculative verify) batch and for no batch, 1000 for anything
else (a prefill) — and when it reaches the interval the scheduler pulls and the counter
restarts at 0.  So while a server only decodes, a request that arrived waits for up to
``interval`` decode passes before the scheduler even sees it, and right after a prefill
pass the next iteration always pulls.  InferenceX runs DeepSeek on Blackwell with an
interval of 30 at concurrency ≥ 16 (10 below): at 20 ms per decode pass that is up to
0.6 s added to TTFT.

An idle scheduler spins through iterations (weight 1 each) in microseconds, so a request
that reaches an idle server is pulled at once; the model does that directly.  SGLang
refuses the option with DP attention, and so does servesim.
"""

from __future__ import annotations

#: Counter weight of a decode (or verify) batch and of an iteration without a batch.
DECODE_WEIGHT = 1
#: Counter weight of every other forward mode (prefill, mixed): the next iteration pulls.
OTHER_WEIGHT = 1000


class RecvSkipper:
    """The poll counter of one SGLang scheduler."""

    def __init__(self, interval: int) -> None:
        if interval < 2:
            raise ValueError("RecvSkipper needs an interval of at least 2 (1 polls every iteration)")
        self.interval = interval
        self.counter = 0

    def tick(self, last_pass_decoded: bool | None) -> bool:
        """One scheduler iteration; ``last_pass_decoded``: True after a decode pass, False after
        a prefill pass, None when the previous iteration ran nothing.  True: pull now."""
        self.counter += OTHER_WEIGHT if last_pass_decoded is False else DECODE_WEIGHT
        if self.counter >= self.interval:
            self.counter = 0
            return True
        return False

    def pull_now(self) -> None:
        """The idle loop's pull (reached within microseconds of spinning)."""
        self.counter = 0

    def decode_passes_before_pull(self) -> int:
        """Decode passes that can follow the one just scheduled before an iteration pulls:
        a decode stretch with requests waiting to be pulled may not run longer."""
        return self.interval - self.counter

    def skip_decode_iterations(self, k: int) -> None:
        """``k`` iterations after decode passes, as a decode stretch replays them; a pull
        they reach finds nothing to take (the stretch stopped before any request arrived
        or :meth:`decode_passes_before_pull` bounded it)."""
        self.counter = (self.counter + k * DECODE_WEIGHT) % self.interval
