"""servesim: predict how an LLM serving deployment behaves under real traffic, without GPUs.

The public entry points are :func:`predict` (run one simulation from a config) and the
``servesim`` command line (:mod:`servesim.cli`).
"""

from __future__ import annotations

from servesim.compiled import load_sources_if_forced

load_sources_if_forced()  # SERVESIM_PURE_PYTHON: modules compiled from source run as Python

__version__ = "0.1.0"

__all__ = ["__version__", "predict", "Prediction", "load_config"]


def __getattr__(name: str):  # lazy imports keep `import servesim` cheap
    if name in ("predict", "Prediction"):
        from servesim import api

        return getattr(api, name)
    if name == "load_config":
        from servesim.config import load_config

        return load_config
    raise AttributeError(name)
