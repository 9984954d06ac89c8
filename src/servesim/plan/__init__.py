"""Deployment planning: SLO attainment and goodput, overload detection, cost and energy,
sweeps over config keys, maximum sustainable load and recommendations (docs/planning.md).

Each module holds one concern; this package import stays light because the config schema
imports the section models (``slo``, ``cost``, ``sweep``) from it.
"""
