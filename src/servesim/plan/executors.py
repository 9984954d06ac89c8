"""Where sweep candidates run: a local process pool (default) or Ray tasks.

Both take plain task mappings and yield ``candidate.evaluate``'s rows in completion order,
keeping at most ``jobs`` candidates in flight so that results stream into the journal (an
interrupted sweep loses only the candidates in flight).  A candidate's row depends only on
the candidate, so both executors give identical rows for the same tasks.
"""

from __future__ import annotations

import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Iterable, Iterator

from servesim.errors import ConfigError
from servesim.plan.candidate import evaluate
from servesim.plan.spec import ExecutorConfig


class InlineExecutor:
    """One candidate at a time in this process (``jobs: 1``): no start-up cost, easy to debug."""

    jobs = 1

    def map(self, tasks: Iterable[dict]) -> Iterator[dict]:
        for task in tasks:
            yield evaluate(task)

    def close(self) -> None:
        pass


class LocalExecutor:
    """A pool of worker processes on this machine."""

    def __init__(self, jobs: int | None = None) -> None:
        self.jobs = jobs or os.cpu_count() or 1
        self._pool = ProcessPoolExecutor(max_workers=self.jobs)

    def map(self, tasks: Iterable[dict]) -> Iterator[dict]:
        it = iter(tasks)
        pending = set()
        for task in it:
            pending.add(self._pool.submit(evaluate, task))
            if len(pending) >= self.jobs:
                break
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                yield fut.result()
                nxt = next(it, None)
                if nxt is not None:
                    pending.add(self._pool.submit(evaluate, nxt))

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)


class RayExecutor:
    """Each candidate a Ray task, on the cluster at ``address`` or on a local Ray started here.

    The cluster's Python must import servesim (and read the workload's files at the same path).
    """

    def __init__(self, address: str | None = None, jobs: int | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("sweep.executor.kind: ray needs the optional extra: pip install 'servesim[ray]'") from None
        self._ray = ray
        self._started = not ray.is_initialized()
        if self._started:
            kwargs = {"address": address} if address else {"num_cpus": jobs or os.cpu_count() or 1,
                                                           "include_dashboard": False}
            try:  # local Ray's workers inherit this process's environment (PYTHONPATH included)
                ray.init(log_to_driver=False, **kwargs)
            except Exception as exc:  # a cluster that cannot be reached is the user's input
                raise ConfigError(f"sweep.executor: cannot start or reach Ray ({exc})") from None
        self.jobs = jobs or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._remote = ray.remote(num_cpus=1)(evaluate)

    def map(self, tasks: Iterable[dict]) -> Iterator[dict]:
        ray = self._ray
        it = iter(tasks)
        pending = []
        for task in it:
            pending.append(self._remote.remote(task))
            if len(pending) >= self.jobs:
                break
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                yield ray.get(ref)
                nxt = next(it, None)
                if nxt is not None:
                    pending.append(self._remote.remote(nxt))

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()


def make_executor(cfg: ExecutorConfig):
    """The executor a sweep's ``executor`` section names."""
    if cfg.kind == "ray":
        return RayExecutor(cfg.address, cfg.jobs)
    if cfg.jobs == 1:
        return InlineExecutor()
    return LocalExecutor(cfg.jobs)
