"""Progress of a run on stderr: requests ended out of the workload's total, with an ETA.

On a terminal it is a live bar (cleared when the run ends).  Elsewhere (a CI log, a file) it is a
plain line at every tenth of the run once it has taken 2 s, so a long run still says how far it is; ``--quiet`` turns
both off.  The total is the workload's request count: known up front for synthetic and recipe
workloads, counted from the trace file's lines for a trace without a time window (with a window
it is unknown, and the bar shows the count alone).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

#: Requests between two updates of the bar (an update costs more than a simulated request).
UPDATE_EVERY = 200
#: Off a terminal, runs shorter than this print no progress line (a log needs none for them).
QUIET_FOR_S = 2.0


#: Trace formats with one request per non-blank line (the others are agent graphs).
FLAT_FORMATS = ("mooncake",)


def expected_requests(cfg) -> int | None:
    """How many requests the run's workload produces, when that is known without simulating."""
    from servesim.config.load import config_base_dir
    from servesim.workload.config import AgentWorkload, TraceWorkload
    from servesim.workload.source import build_source

    w = cfg.workload
    if isinstance(w, AgentWorkload) or isinstance(w, TraceWorkload) and w.format not in FLAT_FORMATS:
        return None  # an agent graph: predict says it (Progress.expect) once the graph is built
    if isinstance(w, TraceWorkload):
        if w.start_ms is not None or w.end_ms is not None:
            return None
        path = Path(w.path).expanduser()
        base = config_base_dir(cfg)
        if not path.is_absolute() and base is not None:
            path = Path(base) / path
        n = count_lines(path)
        if n is None:
            return None
        return min(n, w.limit) if w.limit is not None else n
    return build_source(w, cfg.seed, config_base_dir(cfg)).num_requests


def count_lines(path: Path) -> int | None:
    """Non-blank lines of a JSON-lines file (one request each), read in binary chunks."""
    try:
        with path.open("rb") as f:
            n = 0
            tail = b""
            for chunk in iter(lambda: f.read(1 << 20), b""):
                lines = (tail + chunk).split(b"\n")
                tail = lines.pop()
                n += sum(1 for line in lines if line.strip())
            return n + (1 if tail.strip() else 0)
    except OSError:
        return None


class Progress:
    """``progress(done, sim_time)`` callback of :func:`servesim.predict`, drawing on stderr."""

    def __init__(self, total: int | None, enabled: bool, terminal: bool | None = None) -> None:
        self.total = total
        self.enabled = enabled
        self.terminal = sys.stderr.isatty() if terminal is None else terminal
        self._bar = None
        self._task = None
        self._last = 0
        self._next_tenth = 1
        self._t0 = time.perf_counter()

    def __enter__(self) -> "Progress":
        if self.enabled and self.terminal:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)

            self._bar = Bar(TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TextColumn("requests"),
                            TextColumn("virtual {task.fields[sim]:.0f} s"), TimeElapsedColumn(),
                            TextColumn("ETA"), TimeRemainingColumn(), transient=True, console=Console(stderr=True))
            self._bar.__enter__()
            self._task = self._bar.add_task("sim", total=self.total, sim=0.0)
        return self

    def expect(self, total: int | None) -> None:
        """The request count, told by :func:`servesim.predict` once the workload is read (an
        agent graph's nodes), when the config alone could not say it."""
        if self.total is None and total:
            self.total = total
            if self._bar is not None:
                self._bar.update(self._task, total=total)

    def __call__(self, done: int, sim_time: float) -> None:
        if not self.enabled or done - self._last < UPDATE_EVERY:
            return
        self._last = done
        if self._bar is not None:
            self._bar.update(self._task, completed=done, sim=sim_time)
        elif self.total and done * 10 >= self._next_tenth * self.total:
            self._next_tenth = done * 10 // self.total + 1
            if time.perf_counter() - self._t0 >= QUIET_FOR_S:
                print(self.line(done, sim_time), file=sys.stderr, flush=True)

    def line(self, done: int, sim_time: float) -> str:
        """``simulating: 40% (4,812 of 12,031 requests), virtual 300 s, elapsed 4 s, ETA 6 s``."""
        elapsed = time.perf_counter() - self._t0
        text = f"simulating: {done:,}"
        if self.total:
            share = done / self.total
            text = f"simulating: {share * 100:.0f}% ({done:,} of {self.total:,} requests)"
        text += f", virtual {sim_time:,.0f} s, elapsed {elapsed:,.0f} s"
        if self.total and done:
            text += f", ETA {elapsed * (self.total - done) / done:,.0f} s"
        return text

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
