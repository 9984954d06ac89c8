"""Host-memory KV tier settings shared by the engines (SGLang HiCache, vLLM CPU offload).

Each engine's options carry ``host_kv_gb`` (0: no tier), ``host_link_gbs`` (None: the GPU's
host link from :func:`default_host_link_gbs`) and ``host_load_overlap``.  :class:`HostLink`
turns them, with the deployment's KV bytes per token, into a capacity in tokens and a load
time in seconds.

Units: GB = 10^9 bytes.  ``host_kv_gb`` is the host memory one worker (all its GPUs
together) gives to KV; a token's KV is split over the worker's ``kv_shards`` (tensor
parallel) GPUs, and each GPU loads its share over its own host link, in parallel.
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.engines.base import EngineLimits
from servesim.errors import ConfigError

#: Effective host→GPU bandwidth per GPU and direction, GB/s, by GPU family.
#: PCIe Gen5 x16: 64 GB/s raw, ~50 GB/s achieved by pinned-memory copies; PCIe Gen4 x16:
#: 32 raw, ~25 achieved; Grace-Blackwell (GB200, GB300): NVLink-C2C, 900 GB/s bidirectional
#: = 450 GB/s per direction between the Grace CPU and its GPUs.
PCIE5_GBS = 50.0
PCIE4_GBS = 25.0
NVLINK_C2C_GBS = 450.0
_HOST_LINK_BY_GPU = (
    ("gb200", NVLINK_C2C_GBS),
    ("gb300", NVLINK_C2C_GBS),
    ("gh200", NVLINK_C2C_GBS),
    ("a100", PCIE4_GBS),
    ("l40", PCIE4_GBS),
)


def default_host_link_gbs(gpu_name: str) -> float:
    """The host link of a GPU (GB/s per direction): NVLink-C2C on Grace parts, PCIe otherwise.

    PCIe Gen4 for A100 and L40S, Gen5 for the rest (H100, H200, B200, B300, MI300X/325X/355X)
    and for an unknown GPU.
    """
    low = gpu_name.lower()
    for key, gbs in _HOST_LINK_BY_GPU:
        if key in low:
            return gbs
    return PCIE5_GBS


@dataclass(frozen=True, slots=True)
class HostLink:
    """A worker's host tier: capacity in tokens, and seconds to load tokens to the GPUs."""

    capacity_tokens: int
    link_gbs: float
    bytes_per_token: float  # one token on one GPU
    overlap: bool

    def load_seconds(self, tokens: int) -> float:
        return tokens * self.bytes_per_token / (self.link_gbs * 1e9)


def host_link(engine: str, host_kv_gb: float, host_link_gbs: float | None, overlap: bool,
              limits: EngineLimits, granule: int = 1) -> HostLink | None:
    """The worker's host tier from the engine options, or None when ``host_kv_gb`` is 0.

    ``granule``: capacity is rounded down to whole pages / blocks of this many tokens.
    """
    if host_kv_gb <= 0:
        return None
    if limits.kv_bytes_per_token <= 0:
        raise ConfigError(f"deployment.engine.host_kv_gb: {host_kv_gb} needs the KV bytes per token, "
                          f"which the {engine} deployment did not provide")
    link = host_link_gbs if host_link_gbs is not None else default_host_link_gbs(limits.gpu_name)
    per_token_worker = limits.kv_bytes_per_token * max(limits.kv_shards, 1)
    tokens = int(host_kv_gb * 1e9 // per_token_worker)
    tokens -= tokens % granule
    if tokens <= 0:
        raise ConfigError(f"deployment.engine.host_kv_gb: {host_kv_gb} GB holds no KV "
                          f"{'page' if granule > 1 else 'token'} ({per_token_worker:.0f} bytes per token)")
    return HostLink(capacity_tokens=tokens, link_gbs=float(link),
                    bytes_per_token=limits.kv_bytes_per_token, overlap=overlap)
