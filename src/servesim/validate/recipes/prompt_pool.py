"""Prompt reuse: the campaigns whose client (AIPerf) sent a small pool of prompts to a prefix cache.

Which ``fixed_lengths_unverified`` rows ran that way (:func:`reuses_prompt_pool`), the pool they
assume (:data:`AIPERF_DATASET_ENTRIES`, :data:`AIPERF_POOL_SAMPLING`), and each engine's
prefix-cache flag (:data:`PREFIX_CACHE_FLAGS`): :func:`turn_prefix_cache_on` drops it from a
point's engine section, :func:`prefix_caching` reads it back (``benchmarks/aisimulate_validate.py``
gives AISimulate the same cache).  Apart from the engine modules because it is one rule across
the three engines, decided by the client rather than by any engine's launch script.
"""

from __future__ import annotations

from typing import Any

#: Distinct prompts an AIPerf client sends unless told otherwise: its synthetic dataset has
#: ``--num-dataset-entries`` = 100 entries by default (``ConversationDefaults.NUM`` in
#: ai-dynamo/aiperf), and the requests repeat them until the run ends.
AIPERF_DATASET_ENTRIES = 100
#: How AIPerf picks those entries (``--dataset-sampling-strategy``): ``shuffle``, its default for
#: synthetic data (the option's help text).  The option is not in AIPerf's tree of 2025-10-10, whose
#: releases drew uniformly with replacement; which AIPerf the runs used is not recorded, and the two fit
#: alike (docs/validation.md).
AIPERF_POOL_SAMPLING = "shuffle"
#: Each engine's prefix-cache flag and the value that keeps the cache on: a prompt-pool point drops
#: the flag (:func:`turn_prefix_cache_on`), :func:`prefix_caching` reads it.
PREFIX_CACHE_FLAGS = {"vllm": ("enable_prefix_caching", True), "sglang": ("disable_radix_cache", False),
                      "trtllm": ("enable_block_reuse", True)}
#: ``(system, backend, backend_version)`` of the ``fixed_lengths_unverified`` campaigns whose
#: measured TTFTs need prompt reuse (:func:`reuses_prompt_pool`).
PROMPT_POOL_CAMPAIGNS = frozenset({("h200_sxm", "vllm", "0.12.0"), ("h200_sxm", "sglang", "0.5.6.post2")})


def reuses_prompt_pool(row: dict[str, str]) -> bool:
    """Whether a ``fixed_lengths_unverified`` row is simulated with an AIPerf client reusing
    :data:`AIPERF_DATASET_ENTRIES` prompts against a prefix cache left at its default (on).

    AIConfigurator's benchmark template (``bench_run.sh.j2`` in the aisimulate wheel) drives its
    runs with AIPerf (``--num-requests 20c``, ``--warmup-request-count 2c``, no
    ``--num-dataset-entries``), so 100 distinct prompts serve every request, and the engines'
    defaults keep a prefix cache (vLLM V1, SGLang's radix cache, TensorRT-LLM block reuse).
    Two kinds of rows show it, each in a way no schedule without cache hits allows:

    * runs from NVIDIA's Dynamo images (``image`` names ``ai-dynamo``): Qwen3-32B-NVFP4 on two
      GB200s at c448, 15,000-token prompts, measures 0.97 s TTFT and 13 ms TPOT, i.e. ~60
      requests/s, ~58 PFLOP/s of prefill without reuse, several times the two GPUs' peak;
    * the H200 campaign of SGLang 0.5.6.post2 and vLLM 0.12.0: Llama-3.1-8B-FP8 at c112
      1000/100 measures 72 ms TTFT with 11 ms TPOT, ~90% of the H200's fp8 peak spent on prefill
      alone without reuse; the Llama-3.1-8B SGLang rows sit 2-4x under any lockstep schedule
      (the campaign's Qwen3-235B rows fit either way).

    Chosen on the fit rows (docs/validation.md); the other campaigns (H100, Kimi-K2.5) fit their
    recipes without reuse and keep them.
    """
    if row.get("workload") != "fixed_lengths_unverified":
        return False
    if "ai-dynamo" in (row.get("image") or ""):
        return True
    key = ((row.get("system") or "").strip().lower(), (row.get("backend") or "").strip().lower(),
           (row.get("backend_version") or "").strip())
    return key in PROMPT_POOL_CAMPAIGNS


def turn_prefix_cache_on(engine: dict[str, Any]) -> None:
    """Drop the flags that turn the prefix cache off (the README's typical flags set them), so
    each engine keeps its default: vLLM V1 prefix caching, SGLang's radix cache and TensorRT-LLM
    block reuse are all on unless told otherwise."""
    for flag, _ in PREFIX_CACHE_FLAGS.values():
        engine.pop(flag, None)


def prefix_caching(engine: dict[str, Any]) -> bool:
    """Whether a point's engine section leaves a prefix cache on; an unset flag takes the default
    of servesim's engine options (the engines' own defaults)."""
    from servesim.engines.sglang.options import SGLangOptions
    from servesim.engines.trtllm.options import TRTLLMOptions
    from servesim.engines.vllm.options import VLLMOptions

    name = engine["name"]
    if name not in PREFIX_CACHE_FLAGS:
        raise ValueError(f"no prefix-cache rule for engine {name!r}")
    options = {"vllm": VLLMOptions, "sglang": SGLangOptions, "trtllm": TRTLLMOptions}[name]
    flag, on = PREFIX_CACHE_FLAGS[name]
    return bool(engine.get(flag, options.model_fields[flag].default)) == on
