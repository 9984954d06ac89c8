"""Step-time models: price a forward pass from its per-request composition."""

from servesim.perf.plan import PassPlan, StepTimeModel

__all__ = ["PassPlan", "StepTimeModel"]
