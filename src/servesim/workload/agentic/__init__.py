"""Agentic workloads: plays of dependent LLM calls (a DAG of request nodes).

- ``graph.py``: the representation (:class:`AgenticGraph`) and its checks;
- ``rows.py``: JSON-lines reading with errors naming file, line and field;
- ``formats.py``, ``weka.py``, ``aiperf_dag.py``: readers of the field's trace formats; ``export.py``: writes agentic_mooncake v2;
- ``generator.py``: synthetic agent plays;
- ``load.py``: the ``workload.agentic`` options and when each play starts;
The simulation side (releasing nodes as their dependencies fire) is ``sim/agentic.py``.
"""

from .graph import AgenticGraph, Dependency, GraphBuilder, Node, Play

__all__ = ["AgenticGraph", "Dependency", "GraphBuilder", "Node", "Play"]
