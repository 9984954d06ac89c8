"""Closed-loop benchmark-client recipes: which requests a benchmark client sends.

A closed-loop client keeps ``concurrency`` requests in flight and sends the next one as
soon as one finishes; the *simulator* enforces that.  A recipe only fixes the list of
requests in send order: first the warm-up requests (``warmup=True``, excluded from the
metrics), then the measured ones.  All have ``arrival = 0`` (ready at the start).

- ``inferencex_random`` mirrors the InferenceX client behind the measured benchmarks
  (``shared/data/measured/README.md``): input and output lengths each drawn uniformly from
  the integers ``[floor(range_ratio * L), L]`` with L = isl or osl; prompts are random
  tokens, so every prompt block has a fresh id (no prefix reuse).
- ``fixed``: every request has exactly ``isl`` input and ``osl`` output tokens, also
  with fresh ids; with ``output_spread`` > 0 the output length is drawn uniformly from the
  integers ``[floor((1 - output_spread) * osl), osl]`` instead.

With ``prompt_pool`` = K, the recipe's rules make K entries (lengths and prompt ids) once, and
each request repeats an entry chosen by ``pool_sampling`` (AIPerf's dataset sampling strategies:
shuffle, random, sequential), as AIPerf reuses its synthetic dataset entries: requests that
repeat an entry share its whole prompt, so a prefix cache can serve it.
"""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from .config import ClosedLoopWorkload
from .request import Request

#: Requests drawn per numpy batch.
CHUNK = 65536
#: Tokens per prompt id.  Every block gets a fresh id, so no two requests share one and the
#: value changes no result (it is not a config key); it only sets how many ids a prompt has.
PROMPT_BLOCK = 512


def length_range(length: int, range_ratio: float) -> tuple[int, int]:
    """Inclusive integer range ``[floor(range_ratio * L), L]``, never below 1 token."""
    return max(1, math.floor(range_ratio * length)), length


def _draw_lengths(cfg: ClosedLoopWorkload, rng: np.random.Generator, n: int) -> tuple[list[int], list[int]]:
    """Input and output lengths of ``n`` prompts by the recipe's rules."""
    if cfg.recipe == "inferencex_random":
        lo, hi = length_range(cfg.isl, cfg.range_ratio)
        inputs = rng.integers(lo, hi + 1, size=n).tolist()
        lo, hi = length_range(cfg.osl, cfg.range_ratio)
        outputs = rng.integers(lo, hi + 1, size=n).tolist()
        return inputs, outputs
    inputs = [cfg.isl] * n
    if cfg.output_spread:
        lo, hi = length_range(cfg.osl, 1 - cfg.output_spread)
        return inputs, rng.integers(lo, hi + 1, size=n).tolist()
    return inputs, [cfg.osl] * n


def _pool_order(strategy: str, k: int, total: int, rng: np.random.Generator) -> Iterator[int]:
    """Which of ``k`` pool entries each of ``total`` requests repeats, as AIPerf samples them."""
    done = 0
    while done < total:
        if strategy == "shuffle":  # a random order of all entries, reshuffled after each pass
            order = rng.permutation(k)[:total - done].tolist()
        elif strategy == "random":  # uniform with replacement
            order = rng.integers(0, k, size=min(CHUNK, total - done)).tolist()
        else:  # sequential, wrapping around
            order = [(done + i) % k for i in range(min(CHUNK, total - done))]
        yield from order
        done += len(order)


def _prompts(cfg: ClosedLoopWorkload, rng: np.random.Generator, total: int) -> Iterator[tuple[int, int, tuple[int, ...]]]:
    """``(input_length, output_length, hash_ids)`` of each of ``total`` requests in send order.

    Without a pool every prompt gets fresh block ids; with ``prompt_pool`` = K the K entries
    are drawn first and each request repeats one (:func:`_pool_order`).
    """
    bs = PROMPT_BLOCK
    next_id = 0

    def fresh(inputs: list[int], outputs: list[int]) -> Iterator[tuple[int, int, tuple[int, ...]]]:
        """One entry per length pair, each with block ids no other entry has."""
        nonlocal next_id
        for input_length, output_length in zip(inputs, outputs):
            n_blocks = -(-input_length // bs)
            yield input_length, output_length, tuple(range(next_id, next_id + n_blocks))
            next_id += n_blocks

    if cfg.prompt_pool:
        pool = list(fresh(*_draw_lengths(cfg, rng, cfg.prompt_pool)))
        yield from (pool[k] for k in _pool_order(cfg.resolved_pool_sampling, len(pool), total, rng))
        return
    done = 0
    while done < total:
        n = min(CHUNK, total - done)
        yield from fresh(*_draw_lengths(cfg, rng, n))
        done += n


def generate_closed_loop(cfg: ClosedLoopWorkload, seed: int) -> Iterator[Request]:
    """Warm-up then measured requests of the recipe, in send order, indices 0..N-1."""
    rng = np.random.default_rng(seed)
    n_warmup = cfg.resolved_warmup
    total = n_warmup + cfg.resolved_num_prompts
    for index, (input_length, output_length, hash_ids) in enumerate(_prompts(cfg, rng, total)):
        yield Request(
            index=index,
            request_id=f"{'w' if index < n_warmup else 'r'}{index}",
            arrival=0.0,
            input_length=input_length,
            output_length=output_length,
            hash_ids=hash_ids,
            block_size=PROMPT_BLOCK,
            warmup=index < n_warmup,
        )
