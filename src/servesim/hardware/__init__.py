"""GPU and interconnect specs (bundled YAML files, one per GPU, or a user's YAML file)."""

from servesim.hardware.gpu import GPUSpec, LinkSpec, NetworkSpec, known_gpus, load_gpu

__all__ = ["GPUSpec", "LinkSpec", "NetworkSpec", "known_gpus", "load_gpu"]
