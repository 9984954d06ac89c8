"""vLLM's fast paths equal its general paths, pass by pass.

Two shortcuts must change nothing:

* the leading plain decodes scheduled as arrays (``VLLMDecodeFastPath._fast_decodes``, fed by
  ``_next_prefix`` at each commit) instead of one iteration of the running loop each;
* the LRU block-event replay (``VLLMDecodeFastPath._replay_lru``: one pass's boundary requests and
  decode stretches, walked by ``decode_event_buckets``; on the compiled pool,
  ``engines/vllm/_decode_replay.pyx:replay_decode``) instead of ``_allocate`` per event.

The reference engine turns both off (no prefix is ever recorded; a KV event sink forces the
general block-pool paths) and runs on the pure-Python pool; engines with either or both
shortcuts on, on the Python pool and on the compiled one, must produce the same plans,
request states and pool states after every pass of random workloads, with random stretch
lengths.
"""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from blockkv_harness import build_engines, pool_state
from servesim.engines.blockkv.arithmetic import decode_event_buckets
from servesim.engines.vllm.scheduler import VLLMEngine
from servesim.engines.vllm.options import VLLMOptions
from servesim.metrics.recorder import RequestRecorder
from simharness import drive_lockstep, pool_kinds, random_block_workload


class GeneralPathEngine(VLLMEngine):
    """vLLM with the decode prefix off: every running request goes through the running loop."""

    def _next_prefix(self, batch, k: int) -> None:
        super()._next_prefix(batch, k)
        self._drop_lazy()  # the leading decodes written back, and no longer tracked
        self._prefix = None


def random_options(rng: random.Random) -> tuple[VLLMOptions, int]:
    bs = rng.choice([1, 2, 3, 4, 16])  # 3: residues without the power-of-two mask
    budget = rng.randint(8, 200)
    opt = VLLMOptions(
        block_size=bs,
        max_num_batched_tokens=budget,
        max_num_seqs=rng.randint(1, 10),
        max_model_len=rng.randint(64, 300),
        enable_prefix_caching=rng.random() < 0.8,
        long_prefill_token_threshold=rng.choice([0, 0, rng.randint(1, 50)]),
    )
    return opt, bs * rng.randint(3, 60) + bs


def engine_state(eng: VLLMEngine) -> tuple:
    # The true progress (a lazy decode prefix's rows stand in for its requests' fields).
    reqs = [(vr.req.index, computed, generated, sched, list(vr.blocks), vr.n_cached)
            for vr, computed, sched, generated in eng.running_progress()]
    waiting = [(vr.req.index, vr.computed) for vr in eng.waiting]
    return (reqs, waiting, *pool_state(eng), eng.retractions)


def plan_state(plan) -> tuple:
    return (plan.prefill_new.tolist(), plan.prefill_cached.tolist(), plan.decode_ctx.tolist(),
            plan.is_decode_only, [vr.req.index for vr in plan.requests.reqs])


def make_engines(opt: VLLMOptions, kv: int) -> list[tuple[VLLMEngine, RequestRecorder]]:
    """Reference (both shortcuts off, Python pool), then each shortcut alone, then both: with
    the decode prefix tracked from one request on, and with the engine's own minimum; all but
    the reference on the Python pool and on the compiled one."""
    variants = [(GeneralPathEngine, True, None, True)]
    for python in pool_kinds():
        variants += [(VLLMEngine, True, 1, python), (GeneralPathEngine, False, None, python),
                     (VLLMEngine, False, 1, python), (VLLMEngine, False, None, python)]
    out = build_engines([(cls, python) for cls, _, _, python in variants], opt, kv)
    for (eng, _), (_, sink, fast_min, python) in zip(out, variants):
        assert eng.pool.compiled is not python
        if sink:
            eng.pool.on_event = lambda event: None  # forces the block pool's general paths
        if fast_min is not None:
            eng.fast_decodes_min = fast_min
    return out


def drive(engines, reqs, rng: random.Random) -> int:
    passes, _stretches = drive_lockstep(engines, reqs, rng, plan_state, engine_state,
                                        columns=("first_token", "last_token", "finish", "generated"))
    return passes


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 14))
def test_fast_paths_equal_general_paths(seed: int, n: int) -> None:
    rng = random.Random(seed)
    reqs = random_block_workload(rng, n, max_out=80)
    opt, kv = random_options(rng)
    drive(make_engines(opt, kv), reqs, rng)


def test_fast_paths_on_a_long_decode_batch() -> None:
    """Many requests decoding together over many block boundaries, with shared prefixes."""
    rng = random.Random(7)
    reqs = random_block_workload(rng, 24, max_in=60, max_out=200)
    opt = VLLMOptions(block_size=4, max_num_batched_tokens=512, max_num_seqs=32, max_model_len=400)
    assert VLLMEngine.FAST_DECODES_MIN <= 24  # the last engine crosses its own minimum both ways
    assert drive(make_engines(opt, 4 * 600), reqs, rng) > 50


def events_pass_by_pass(computed: list[int], first: int, k: int, bs: int, caching: bool) -> list[tuple]:
    """Reference: walk every pass s = first..k-1 and every request, as step mode meets them."""
    out = []
    for s in range(first, k):
        for j, c in enumerate(computed):
            if (c + s) % bs == 0:  # position c + s starts a new block
                out.append((s, j, 0))
            if caching and (c + s + 1) % bs == 0:  # position c + s completes one
                out.append((s, j, 1))
    return out


@settings(max_examples=300, deadline=None)
@given(computed=st.lists(st.integers(0, 200), min_size=1, max_size=8), first=st.integers(0, 1),
       k=st.integers(1, 80), bs=st.sampled_from([1, 2, 3, 8, 16, 32]), caching=st.booleans())
def test_decode_event_buckets_match_pass_by_pass(computed, first, k, bs, caching):
    buckets = decode_event_buckets(computed, first, k, bs, caching)
    assert len(buckets) == bs
    got = [(s, j, kind) for s in range(first, k) for j, kind in buckets[s % bs]]
    assert got == events_pass_by_pass(computed, first, k, bs, caching)
