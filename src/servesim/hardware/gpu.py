"""GPU and interconnect specs: bundled YAML files (one per GPU) or a user's YAML file.

All throughput numbers are *dense* (no structured sparsity) vendor peaks; efficiency
factors live in the step-time model's parameters, not here.  Units: memory in GB
(10^9 bytes) as marketed, bandwidths in GB/s (10^9 bytes/s) per GPU and per direction,
latencies in microseconds, compute in TFLOPS (10^12 op/s).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from servesim import yaml_io
from servesim.errors import ModelError, did_you_mean

GPU_DIR = Path(__file__).parent / "gpus"

#: precisions a spec may list peaks for.
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp6", "fp4", "int8", "int4")
#: ``achievable`` keys for the rate at which GEMM and MoE kernels stream *quantized* weights,
#: as a fraction of the rate they stream bf16 weights (``hbm``): the scales ride along, the
#: dequantization sits in the load loop, and the kernels run fewer bytes per thread block.
STREAM_KEYS = ("stream_fp8", "stream_int8", "stream_nvfp4", "stream_mxfp4", "stream_int4")
#: NCCL collectives a spec may give a measured timing law for (:class:`CollectiveLaw`).
NCCL_OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LinkSpec(_Strict):
    """A scale-up link (NVLink, AMD xGMI/Infinity Fabric, PCIe)."""

    kind: Literal["nvlink", "xgmi", "pcie"]
    #: per-GPU unidirectional bandwidth to the rest of the domain, GB/s.
    bandwidth_gbs: float = Field(gt=0)
    #: one-hop latency, microseconds.
    latency_us: float = Field(ge=0)
    #: GPUs reachable over this link (8 in an HGX board, 72 in an NVL72 rack).
    domain_size: int = Field(default=8, ge=1)


class NetworkSpec(_Strict):
    """Scale-out network (InfiniBand / RoCE / Ethernet) per GPU."""

    bandwidth_gbs: float = Field(gt=0)
    latency_us: float = Field(ge=0)


class CollectiveLaw(_Strict):
    """How long one NCCL collective takes within the scale-up domain, as measured.

    NCCL pipelines a collective's data in chunks through ``steps`` hops (a ring's ``r − 1``
    per phase).  With ``V`` the bytes each GPU sends and ``B`` the link bandwidth, a well
    chunked pipeline takes ``(√(V / (B · bus_eff)) + √(startup + steps · step))²``
    (``perf/kernels.py:OpModel.nccl``): the fixed cost for small messages, the bus rate for
    large ones, the pipeline's fill between.  Fitted per GPU and collective on the measured
    NCCL tables by ``benchmarks/fit_collectives.py``.  The engines' custom all-reduce
    (``GPUSpec.custom_all_reduce``) follows the same law with one hop per doubling of ranks.
    """

    #: launch and synchronisation cost of one collective, microseconds.
    startup_us: float = Field(ge=0)
    #: latency of one pipeline hop, microseconds.
    step_us: float = Field(ge=0)
    #: fraction of the scale-up link bandwidth the collective's data moves at.
    bus_eff: float = Field(gt=0, le=1)


class GPUSpec(_Strict):
    """One accelerator's capacity, bandwidth, dense peaks and links."""

    name: str
    aliases: list[str] = []
    vendor: Literal["nvidia", "amd", "other"] = "other"
    #: HBM capacity as marketed, GB.
    memory_gb: float = Field(gt=0)
    #: total memory the driver reports (what engines see as "total"), GiB; None: memory_gb.
    visible_memory_gib: float | None = Field(default=None, gt=0)
    memory_bandwidth_gbs: float = Field(gt=0)
    #: CUDA compute capability ("9.0", "10.0", ...) of NVIDIA parts; engines pick kernels and
    #: defaults by it (e.g. SGLang's KV dtype for sparse-attention models).  None elsewhere.
    compute_capability: str | None = Field(default=None, pattern=r"^\d+\.\d+$")
    #: dense peak TFLOPS by precision (keys from PRECISIONS); bf16 required.
    tflops: dict[str, float]
    scale_up: LinkSpec
    scale_out: NetworkSpec
    #: streaming multiprocessors (NVIDIA) or compute units (AMD): the op model quantizes a
    #: GEMM's output tiles and an attention kernel's blocks into waves over them.  None: no
    #: wave quantization.
    sm_count: int | None = Field(default=None, ge=1)
    #: shortest time one kernel takes on the GPU (launch-to-completion of an empty-sized
    #: GEMM under CUDA graphs), microseconds: every op pays it once per kernel.
    kernel_latency_us: float = Field(default=2.0, ge=0)
    #: measured ceilings (microbenchmark maxima), as fractions of the peaks above: GEMM per
    #: compute precision (``bf16``, ``fp8``, ``fp4``, ...) and HBM streaming (``hbm``).  The
    #: op model never runs an op faster than these, whatever a calibration asks for.
    achievable: dict[str, float] = {}
    #: fixed extra time of a GEMM op with quantized activations, microseconds, per compute
    #: precision (``fp8``, ``fp4``): beyond the GEMM kernel itself, the serving frameworks'
    #: op quantizes the activations and lays out their scales (one or more small kernels)
    #: before the GEMM runs.  Measured from the kernel tables' small shapes.
    quant_op_latency_us: dict[str, float] = {}
    #: a streaming (memory-bound) kernel's ramp and tail, microseconds: beyond its bytes over
    #: the bandwidth, the kernel loses time filling its load pipeline and draining its last,
    #: uneven wave of thread blocks (a GEMM split in K also reduces the partial sums).  The op
    #: model adds ``ramp · t / (t + ramp)`` to a streaming time ``t``: a small kernel pays about
    #: its own streaming time again, a large one ``ramp`` (``OpModel.gemm``'s weights, decode
    #: attention's KV per layer).  Measured from the kernel tables' bf16 GEMMs
    #: (benchmarks/fit_kernel_ceilings.py); 0 where no table measures it.
    stream_ramp_us: float = Field(default=0.0, ge=0)
    #: measured NCCL timing per collective (keys from :data:`NCCL_OPS`); a collective not
    #: listed is priced from the links alone (``OpModel.nccl``).
    nccl: dict[str, CollectiveLaw] = {}
    #: measured timing of the serving engines' custom all-reduce (the pass's tensor-parallel
    #: all-reduce under CUDA graphs) within the scale-up domain; ``step_us`` is paid per
    #: doubling of ranks (``OpModel.all_reduce``).  None: priced from the links alone.
    custom_all_reduce: CollectiveLaw | None = None
    #: field path (e.g. "tflops.fp8", "scale_up.bandwidth_gbs") → where the number comes from.
    sources: dict[str, list[str]] = {}
    notes: str = ""

    @property
    def cuda_major(self) -> int | None:
        """Major CUDA compute capability (9 Hopper, 10 Blackwell), None for non-NVIDIA parts."""
        return int(self.compute_capability.split(".")[0]) if self.compute_capability else None

    @field_validator("achievable")
    @classmethod
    def _check_achievable(cls, v: dict[str, float]) -> dict[str, float]:
        bad = [k for k in v if k not in PRECISIONS and k != "hbm" and k not in STREAM_KEYS]
        if bad:
            raise ValueError(f"unknown key(s) {bad}; expected 'hbm', some of {list(PRECISIONS)} "
                             f"or some of {list(STREAM_KEYS)}")
        if any(not 0 < x <= 1 for x in v.values()):
            raise ValueError("achievable fractions must be in (0, 1]")
        return v

    @field_validator("nccl")
    @classmethod
    def _check_nccl(cls, v: dict[str, CollectiveLaw]) -> dict[str, CollectiveLaw]:
        bad = [k for k in v if k not in NCCL_OPS]
        if bad:
            raise ValueError(f"unknown collective(s) {bad}; expected some of {list(NCCL_OPS)}")
        return v

    def ceiling(self, key: str) -> float:
        """Measured achievable fraction of the peak for ``key`` (a precision, ``hbm`` or a
        ``stream_<format>`` ratio); 1 if unknown."""
        return self.achievable.get(key, 1.0)

    @field_validator("tflops")
    @classmethod
    def _check_tflops(cls, v: dict[str, float]) -> dict[str, float]:
        bad = [k for k in v if k not in PRECISIONS]
        if bad:
            raise ValueError(f"unknown precision(s) {bad}; expected some of {list(PRECISIONS)}")
        if "bf16" not in v:
            raise ValueError("tflops.bf16 is required")
        if any(x <= 0 for x in v.values()):
            raise ValueError("tflops values must be > 0")
        return v

    @property
    def memory_bytes(self) -> float:
        """Total device memory in bytes, as engines see it."""
        if self.visible_memory_gib is not None:
            return self.visible_memory_gib * 2**30
        return self.memory_gb * 1e9

    def supports(self, precision: str) -> bool:
        return precision in self.tflops

    def peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s for a compute precision; falls back to bf16 when unsupported."""
        return self.tflops.get(precision, self.tflops["bf16"]) * 1e12


def _load_yaml(path: Path) -> GPUSpec:
    try:
        data = yaml_io.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise ModelError(f"{path}:{line} not valid YAML ({getattr(e, 'problem', e)})") from None
    except OSError as e:
        raise ModelError(f"{path}: cannot read ({e.strerror})") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path}: expected a mapping of GPU spec keys")
    try:
        return GPUSpec.model_validate(data)
    except ValidationError as e:
        errs = "; ".join(
            f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']} (found {err.get('input')!r})"
            for err in e.errors()
        )
        raise ModelError(f"{path}: invalid GPU spec: {errs}") from None


def known_gpus() -> list[str]:
    return sorted(p.stem for p in GPU_DIR.glob("*.yaml"))


@functools.lru_cache(maxsize=1)
def _alias_table() -> dict[str, Path]:
    """Bundled name or alias → file (parsed once per process: the bundled files do not change)."""
    table: dict[str, Path] = {}
    for p in sorted(GPU_DIR.glob("*.yaml")):
        table[p.stem.lower()] = p
        data = yaml_io.safe_load(p.read_text()) or {}
        for a in data.get("aliases", []) or []:
            table.setdefault(str(a).lower(), p)
    return table


def load_gpu(name_or_yaml_path: str | Path) -> GPUSpec:
    """A bundled GPU by name or alias (``h100_sxm``, ``b200``), or a user's YAML file."""
    s = str(name_or_yaml_path)
    p = Path(s).expanduser()
    if p.suffix in (".yaml", ".yml") or p.is_file():
        if not p.is_file():
            raise ModelError(f"GPU spec file {s!r}: no such file")
        return _load_yaml(p)
    hit = _alias_table().get(s.strip().lower().replace("-", "_"))
    if hit is None:
        hit = _alias_table().get(s.strip().lower())
    if hit is None:
        raise ModelError(
            f"unknown GPU {s!r}{did_you_mean(s, [*known_gpus(), *_alias_table()])}; known GPUs: {', '.join(known_gpus())} "
            "(or give the path of a GPU spec YAML file with the same schema)"
        )
    return _load_bundled(hit)


@functools.lru_cache(maxsize=None)
def _load_bundled(path: Path) -> GPUSpec:
    """A bundled spec, validated once per process (``GPUSpec`` is frozen, so sharing is safe)."""
    return _load_yaml(path)
