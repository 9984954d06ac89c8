"""Step-time models: price a forward pass from its per-request composition."""

from servesim.perf.plan import PassPlan, StepTimeModel, stretch_by_steps

__all__ = [
    "PassPlan",
    "StepTimeModel",
    "stretch_by_steps",
    "AnalyticParams",
    "AnalyticStepTime",
    "FixedStepTime",
    "LinearStepTime",
    "Layout",
    "MemoryBudget",
    "kv_capacity_tokens",
    "memory_budget",
    "weights_bytes_per_gpu",
    "build_step_time",
    "parse_perf_config",
]


def __getattr__(name: str):  # lazy: keep `import servesim.perf` cheap
    if name == "AnalyticParams":
        from servesim.perf.analytic_params import AnalyticParams

        return AnalyticParams
    if name == "AnalyticStepTime":
        from servesim.perf.analytic import AnalyticStepTime

        return AnalyticStepTime
    if name in ("FixedStepTime", "LinearStepTime"):
        from servesim.perf import simple

        return getattr(simple, name)
    if name in ("Layout", "MemoryBudget", "kv_capacity_tokens", "memory_budget", "weights_bytes_per_gpu"):
        from servesim.perf import memory

        return getattr(memory, name)
    if name in ("build_step_time", "parse_perf_config"):
        from servesim.perf import config

        return getattr(config, name)
    raise AttributeError(name)
