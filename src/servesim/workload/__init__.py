"""Workload sources: trace readers, synthetic generators and benchmark-client recipes.

Start at :func:`build_source`: it turns a validated ``workload:`` config
(:mod:`.config`) into a :class:`WorkloadSource`, whose ``requests()`` streams
:class:`Request` records.  One module per concern:

- ``request.py``: the :class:`Request` record and the block-id grid (``sequence_units``);
- ``config.py``: pydantic models of the three workload kinds;
- ``trace.py``: streaming Mooncake JSONL reader;
- ``distributions.py``: vectorised sampling of lengths, durations and arrivals;
- ``synthetic.py``: open-loop synthetic traffic, shared prefixes, multi-turn sessions;
- ``recipes.py``: closed-loop benchmark-client recipes (InferenceX random, fixed);
- ``source.py``: :class:`WorkloadSource` and :func:`build_source`.
"""

from .config import (
    ClosedLoopWorkload,
    SyntheticWorkload,
    TraceWorkload,
    WorkloadConfig,
    parse_workload,
)
from .request import Request, sequence_units
from .source import WorkloadSource, build_source
from .trace import read_mooncake

__all__ = [
    "ClosedLoopWorkload",
    "Request",
    "SyntheticWorkload",
    "TraceWorkload",
    "WorkloadConfig",
    "WorkloadSource",
    "build_source",
    "parse_workload",
    "read_mooncake",
    "sequence_units",
]
