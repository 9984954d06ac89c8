"""What an engine's planner is given and gives back.

A planner turns one engine's options and the deployment's resolved facts (model, GPU,
parallel layout, precisions) into an :class:`EnginePlan`: the memory budget the engine
leaves for KV, the settings it resolved (shown in prediction.json), its context length and
a factory for its per-worker engines.  Planners live with their engines
(``engines/vllm/planner.py``, ``engines/trtllm/planner.py``); ``cluster/deployment.py``
picks one by the engine's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from servesim.engines.base import Engine, EngineLimits
from servesim.hardware.gpu import GPUSpec
from servesim.metrics.recorder import RequestRecorder
from servesim.models.arch import ModelArch
from servesim.perf.memory import Layout, MemoryBudget


@dataclass(frozen=True)
class PlanInputs:
    """The deployment's facts a planner needs besides its engine's options."""

    arch: ModelArch
    gpu: GPUSpec
    layout: Layout
    weight_dtype: str
    kv_dtype: str
    #: Future block uses for the belady eviction policy (None for other policies).
    oracle: object = None
    #: Whether speculative decoding is configured (some engines change defaults for it).
    speculative: bool = False

    @property
    def gpu_gib(self) -> float:
        return self.gpu.memory_bytes / 2**30


@dataclass
class EnginePlan:
    """What one engine kind contributes: its memory rule, settings and engine factory."""

    memory: MemoryBudget
    settings: dict
    context: int
    make: Callable[[int, RequestRecorder, EngineLimits], Engine]
    #: Passes outside a CUDA graph run the model in PyTorch eager mode, dispatching every
    #: operation from Python (SGLang without piecewise graphs); False where the engine compiles
    #: its model (vLLM's torch.compile) or runs fused custom ops (TensorRT-LLM).  The step-time
    #: model prices the host time of those dispatches (perf/launches.py).
    eager_launch: bool = False
    #: The engine's event loop prepares the next pass on the CPU while the GPU runs this one
    #: (SGLang's overlap scheduler, vLLM's async scheduling), so a pass takes the longer of the
    #: GPU's time and the scheduler's CPU time, not their sum (perf/frontend.py,
    #: SchedulerOverheadStepTime).
    overlaps_host: bool = False
    #: Expert parallelism dispatches each token only to the ranks of its routed experts (an
    #: all-to-all: DeepEP, pplx, TensorRT-LLM's NVLink all-to-all), so a rank's fused MoE sees
    #: only its routed (token, expert) pairs.  False (and always without expert parallelism):
    #: every expert-parallel rank runs its fused MoE over the whole batch — the tensor-parallel
    #: replicated batch, or with attention DP the batch all-gathered from the ranks — with the
    #: remote experts' ids masked, and the step-time model prices those masked slots
    #: (perf/analytic.py, ``AnalyticStepTime(moe_all_to_all=...)``).
    moe_all_to_all: bool = False
    #: The fused-MoE kernel path the engine runs the routed experts on
    #: (``perf/engine_kernels.py:MOE_KERNEL_PATHS``), or None for the path the engine's rates for
    #: the experts' format describe (``MOE_DEFAULT_PATH``): TensorRT-LLM's ``moe_config.backend``,
    #: vLLM's ``VLLM_MXFP4_USE_MARLIN``.
    moe_kernel: str | None = None
    #: Seconds a CUDA-graph decode pass takes beyond its layers' kernels (the input copies, the
    #: graph's launch, sampling and the output copy, and whatever host work the engine's loop
    #: leaves on the pass's path), where the engine's differs from the op model's default
    #: (``AnalyticParams.graph_pass_overhead_s``); None: that default.  A calibration file that
    #: sets the value wins.
    graph_pass_overhead_s: float | None = None
