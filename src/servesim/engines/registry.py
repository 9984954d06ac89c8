"""The engines servesim models, by the name in ``deployment.engine.name``.

Each engine is a package (``engines/<name>/``) with its options, its planner and its
scheduler; the planner turns the options and the deployment's facts into an
:class:`~servesim.engines.planning.EnginePlan`.  ``cluster/deployment.py`` plans an engine
through :func:`plan_engine`; nothing else switches on an engine's name to build one.
"""

from __future__ import annotations

from typing import Callable

from servesim.engines.planning import EnginePlan, PlanInputs
from servesim.engines.sglang.planner import plan_sglang
from servesim.engines.trtllm.planner import plan_trtllm
from servesim.engines.vllm.planner import plan_vllm

#: Each engine's planner, by name.
PLANNERS: dict[str, Callable[..., EnginePlan]] = {"sglang": plan_sglang, "vllm": plan_vllm, "trtllm": plan_trtllm}


def plan_engine(options, facts: PlanInputs) -> EnginePlan:
    """The plan of the engine ``options`` configure (its ``name`` picks the planner)."""
    return PLANNERS[options.name](options, facts)
