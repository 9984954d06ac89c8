"""Each engine's options for a measured benchmark row, as its campaign's recipe set them.

A ``calibration.csv`` row records the model, GPUs, layout and load, not the server flags; those
come from the campaign that measured it: InferenceX's launch scripts at the row's date, NVIDIA's
and AMD's documented recipes, an AIPerf client's prompt pool.  One module per concern:

- :mod:`.rows`: reading a row (integer columns, the worker's GPUs, InferenceX or not, servesim's
  GPU and engine names);
- :mod:`.vllm`, :mod:`.sglang` (with ATOM, simulated by SGLang's scheduler), :mod:`.trtllm`
  (with InferenceX's DeepSeek MTP sweeps): each engine's flags and KV precision;
- :mod:`.prompt_pool`: the campaigns whose client reused a pool of prompts, and the
  prefix-cache flags that follow.

This module dispatches on the row's backend (:func:`engine_options`, :func:`kv_dtype`);
``validate/points.py`` builds the rest of the point's config around them.
"""

from __future__ import annotations

from typing import Any

from servesim.validate.recipes.rows import BACKEND_AS_ENGINE
from servesim.validate.recipes.sglang import ATOM_KV_DTYPE, atom_options, sglang_kv_dtype, sglang_options
from servesim.validate.recipes.trtllm import trtllm_kv_dtype, trtllm_options
from servesim.validate.recipes.vllm import vllm_kv_dtype, vllm_options


def _engine_fields(name: str) -> set[str] | None:
    """The option names an engine's options class accepts (None: engine not in this build)."""
    import importlib

    mod, cls = {"sglang": ("servesim.engines.sglang.options", "SGLangOptions"),
                "vllm": ("servesim.engines.vllm.options", "VLLMOptions"),
                "trtllm": ("servesim.engines.trtllm.options", "TRTLLMOptions")}[name]
    try:
        klass = getattr(importlib.import_module(mod), cls)
    except (ImportError, AttributeError):
        return None
    return set(klass.model_fields)


def engine_options(backend: str, row: dict[str, str]) -> dict[str, Any]:
    """The engine section for a point (``name`` = the engine model that simulates ``backend``),
    keeping only the options this build's engine model knows."""
    if backend == "vllm":
        opts = vllm_options(row)
    elif backend == "sglang":
        opts = sglang_options(row)
    elif backend == "trtllm":
        opts = trtllm_options(row)
    elif backend == "atom":
        opts = atom_options(row)
    else:
        opts = {}
    engine = BACKEND_AS_ENGINE.get(backend, backend)
    known = _engine_fields(engine)
    if known is not None:  # keep only the options this build's engine model knows
        opts = {k: v for k, v in opts.items() if k in known}
    return {"name": engine, **opts}


def kv_dtype(backend: str, row: dict[str, str], gpu: str | None) -> str | None:
    """``deployment.kv_dtype`` of a point on ``backend`` (``gpu``: servesim's GPU name); None
    leaves the engine's ``auto`` default (see each engine module)."""
    if backend == "vllm":
        return vllm_kv_dtype(row)
    if backend == "trtllm":
        return trtllm_kv_dtype(row)
    if backend == "atom":
        return ATOM_KV_DTYPE
    if backend == "sglang":
        return sglang_kv_dtype((row.get("precision") or "").strip().lower() or "bf16", gpu)
    return "bf16"
