"""Closed-loop recipes: length ranges, warm-up flags, unique block ids."""

from __future__ import annotations

import math

from servesim.workload import build_source, parse_workload
from servesim.workload.recipes import length_range


def closed(**kw):
    base = {"kind": "closed_loop", "recipe": "inferencex_random", "concurrency": 16, "isl": 1024, "osl": 300}
    return parse_workload({**base, **kw})


def test_inferencex_random_lengths_and_warmup():
    src = build_source(closed(), seed=3)
    assert src.mode == "closed" and src.concurrency == 16
    assert src.num_requests == 16 * 12 and src.num_warmup == 32
    reqs = list(src.requests())
    assert len(reqs) == 192
    assert [r.index for r in reqs] == list(range(192))
    assert [r.warmup for r in reqs] == [True] * 32 + [False] * 160
    assert all(r.arrival == 0.0 and r.after is None for r in reqs)
    ins = [r.input_length for r in reqs]
    outs = [r.output_length for r in reqs]
    assert min(ins) >= math.floor(0.8 * 1024) and max(ins) <= 1024
    assert min(outs) >= 240 and max(outs) <= 300
    assert min(ins) < 830 and max(ins) > 1010  # the range is actually used
    # random prompts: no block id is shared between requests
    ids = [i for r in reqs for i in r.hash_ids]
    assert len(ids) == len(set(ids))
    assert all(len(r.hash_ids) == -(-r.input_length // 512) for r in reqs)


def test_overrides_and_fixed():
    reqs = list(build_source(closed(num_prompts=5, warmup=1, range_ratio=1.0), seed=0).requests())
    assert len(reqs) == 6 and all(r.input_length == 1024 and r.output_length == 300 for r in reqs)
    reqs = list(build_source(closed(recipe="fixed", isl=100, osl=7), seed=0).requests())
    assert len(reqs) == 160 and not any(r.warmup for r in reqs)
    assert {(r.input_length, r.output_length) for r in reqs} == {(100, 7)}


def test_length_range_never_zero():
    assert length_range(1, 0.8) == (1, 1)
    assert length_range(1024, 0.8) == (819, 1024)


def test_deterministic():
    a = [(r.input_length, r.output_length) for r in build_source(closed(), seed=9).requests()]
    b = [(r.input_length, r.output_length) for r in build_source(closed(), seed=9).requests()]
    c = [(r.input_length, r.output_length) for r in build_source(closed(), seed=10).requests()]
    assert a == b and a != c


def test_fixed_output_spread_draws_outputs_from_its_range():
    reqs = list(build_source(closed(recipe="fixed", isl=100, osl=200, output_spread=0.05), seed=1).requests())
    outs = [r.output_length for r in reqs]
    assert all(r.input_length == 100 for r in reqs)  # inputs stay exact
    assert set(outs) == set(range(math.floor(0.95 * 200), 201))  # the whole range, both ends included
    again = [r.output_length for r in build_source(closed(recipe="fixed", isl=100, osl=200, output_spread=0.05),
                                                   seed=1).requests()]
    assert outs == again


def test_output_spread_is_for_the_fixed_recipe_only():
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="output_spread applies to recipe 'fixed' only"):
        closed(output_spread=0.02)
    with pytest.raises(ValidationError):
        closed(recipe="fixed", output_spread=1.0)


def test_output_spread_never_draws_an_empty_output():
    reqs = list(build_source(closed(recipe="fixed", isl=10, osl=1, output_spread=0.5), seed=0).requests())
    assert {r.output_length for r in reqs} == {1}


def test_prompt_pool_repeats_whole_prompts_from_a_fixed_set():
    """AIPerf-style client: K entries made once, every request (warm-up included) repeats one."""
    cfg = closed(recipe="fixed", isl=1100, osl=50, prompt_pool=5, num_prompts=400, warmup=32)
    reqs = list(build_source(cfg, seed=7).requests())
    assert len(reqs) == 432 and [r.index for r in reqs] == list(range(432))
    prompts = {r.hash_ids for r in reqs}
    assert len(prompts) == 5  # 432 draws from 5 entries: all of them appear, nothing else
    assert all(len(p) == 3 for p in prompts)  # 1100 tokens = three 512-token blocks
    ids = [i for p in prompts for i in p]
    assert len(ids) == len(set(ids))  # entries share no block: no prefix across entries
    assert all(r.input_length == 1100 and r.output_length == 50 for r in reqs)
    # the choice is uniform: every entry is drawn roughly 432 / 5 times
    counts = [sum(r.hash_ids == p for r in reqs) for p in prompts]
    assert min(counts) > 50 and max(counts) < 125


def test_prompt_pool_entries_keep_their_own_lengths_and_the_run_is_reproducible():
    cfg = closed(prompt_pool=3, num_prompts=60, warmup=0)  # inferencex_random lengths, drawn per entry
    reqs = list(build_source(cfg, seed=1).requests())
    by_prompt: dict[tuple, set] = {}
    for r in reqs:
        by_prompt.setdefault(r.hash_ids, set()).add((r.input_length, r.output_length))
        assert len(r.hash_ids) == -(-r.input_length // 512)
    assert len(by_prompt) == 3 and all(len(v) == 1 for v in by_prompt.values())
    again = list(build_source(cfg, seed=1).requests())
    assert [(r.hash_ids, r.output_length) for r in again] == [(r.hash_ids, r.output_length) for r in reqs]
    other = list(build_source(cfg, seed=2).requests())
    assert [r.hash_ids for r in other] != [r.hash_ids for r in reqs]


def test_prompt_pool_sampling_strategies():
    """shuffle (AIPerf's default): every entry once per pass of K requests, a new order each pass, a
    partial last pass; sequential: entries in order; random: with replacement (the draws of the
    first version of the pool, pinned)."""
    def entries(strategy, n=30):
        kw = {"pool_sampling": strategy} if strategy else {}
        reqs = build_source(closed(recipe="fixed", isl=600, osl=5, prompt_pool=10, num_prompts=n, warmup=0, **kw),
                            seed=4).requests()
        return [r.hash_ids[0] // 2 for r in reqs]  # entry k holds block ids 2k, 2k + 1

    shuffled = entries("shuffle", n=25)
    assert sorted(shuffled[:10]) == sorted(shuffled[10:20]) == list(range(10))
    assert shuffled[10:20] != shuffled[:10]  # reshuffled after a pass
    assert len(set(shuffled[20:])) == 5  # the partial last pass repeats nothing either
    assert entries(None, n=25) == shuffled  # shuffle is the default
    assert entries("sequential") == list(range(10)) * 3
    assert entries("random", n=12) == [7, 9, 8, 5, 9, 9, 9, 0, 4, 6, 2, 3]


def test_prompt_pool_must_be_positive_and_sampling_needs_a_pool():
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        closed(prompt_pool=0)
    with pytest.raises(ValidationError, match="pool_sampling applies with prompt_pool only"):
        closed(pool_sampling="random")


def test_a_closed_loop_config_survives_a_dump_and_reload():
    """Configs are written back (prediction.json's "config"); unset pool keys must reload as unset."""
    from servesim.workload.config import ClosedLoopWorkload

    for extra in ({}, {"prompt_pool": 4}, {"prompt_pool": 4, "pool_sampling": "random"}):
        cfg = closed(**extra)
        again = parse_workload(cfg.model_dump(mode="json"))
        assert isinstance(again, ClosedLoopWorkload) and again == cfg


def test_requests_without_a_pool_are_pinned():
    """The request stream of a seed is fixed: a change in the draw order would move every result."""
    reqs = list(build_source(closed(num_prompts=4, warmup=1, isl=2000, osl=50), seed=11).requests())
    assert [(r.input_length, r.output_length) for r in reqs] == PINNED_LENGTHS
    assert [r.hash_ids for r in reqs] == PINNED_IDS


#: ``closed(num_prompts=4, warmup=1, isl=2000, osl=50)`` at seed 11, as generated before the prompt
#: pool existed (commit 2459ff6): the pool must not change the stream of a run without one.
PINNED_LENGTHS = [(1653, 46), (1651, 47), (1919, 40), (1800, 45), (1836, 41)]
PINNED_IDS = [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15), (16, 17, 18, 19)]


def test_every_engine_serves_a_reused_prompt_pool_from_its_prefix_cache():
    """The pool's repeated block ids are what each engine's prefix cache (vLLM hashed blocks, SGLang
    radix tree, TensorRT-LLM block reuse) matches: after the first pass over the pool, prompts are
    hits; with fresh prompts nothing is."""
    from servesim.api import predict

    for engine in ("vllm", "sglang", "trtllm"):
        cfg = {"seed": 0,
               "workload": {"kind": "closed_loop", "recipe": "fixed", "concurrency": 8, "isl": 2048, "osl": 8,
                            "num_prompts": 160, "warmup": 16, "prompt_pool": 16},
               "deployment": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100_sxm",
                              "engine": {"name": engine}},
               "output": {"dir": None, "timeseries": False}}
        pooled = predict(cfg).summary["cache"]["prefix_reuse_ratio"]
        del cfg["workload"]["prompt_pool"]
        fresh = predict(cfg).summary["cache"]["prefix_reuse_ratio"]
        assert pooled > 0.9 and fresh < 0.01, (engine, pooled, fresh)
