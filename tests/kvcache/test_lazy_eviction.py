"""The radix cache's persistent lazy eviction heap (lru, lfu, fifo) evicts exactly what a
heap rebuilt from all evictable leaves on every call would, in the same order."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.kvcache import RadixCache

U = 8


def prompt(seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    n = rng.randint(1, 6)
    ids = [rng.randrange(3) if k < 2 else rng.randrange(16) for k in range(n)]
    return [(b, U) for b in ids[:-1]] + [(ids[-1], rng.randint(1, U))]


def drive(ops, capacity, page, policy, lazy):
    removed: list[tuple] = []
    c = RadixCache(capacity, page_size=page, policy=policy,
                   on_event=lambda ev: removed.append(ev.segments) if ev.kind == "removed" else None)
    c._lazy = lazy
    active: list[dict] = []
    for t, (op, seed) in enumerate(ops):
        c.now = float(t)
        rng = random.Random(seed)
        if op == "start":
            units = prompt(seed)
            total = sum(n for _, n in units)
            m = c.match_prefix(units, total)
            c.inc_lock_ref(m.node)
            if c.alloc(total - m.tokens):
                active.append({"units": units, "total": total, "m": m})
            else:
                c.dec_lock_ref(m.node)
        elif op == "finish" and active:
            r = active.pop(rng.randrange(len(active)))
            c.cache_finished(r["units"], r["total"], r["m"].tokens, r["m"].node)
        elif op == "chunk" and active:
            r = active[rng.randrange(len(active))]
            done = rng.randint(r["m"].tokens, r["total"])
            r["m"] = c.cache_unfinished(r["units"], done, r["m"].tokens, r["m"].node)
        elif op == "evict":
            c.evict(rng.randint(1, 40))
        elif op == "match":
            c.match_prefix(prompt(seed))
        c.check_invariants()
        removed.append(("after", t, c.evictable_size, c.pool.free_tokens))
    return removed


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(st.tuples(st.sampled_from(["start", "start", "finish", "chunk", "evict", "match"]),
                           st.integers(0, 10**6)), min_size=1, max_size=80),
    capacity=st.integers(8, 120),
    page=st.sampled_from([1, 2, 4]),
    policy=st.sampled_from(["lru", "lfu", "fifo"]),
)
def test_lazy_heap_evicts_like_a_rebuilt_heap(ops, capacity, page, policy):
    assert drive(ops, capacity, page, policy, lazy=True) == drive(ops, capacity, page, policy, lazy=False)


def test_lazy_heap_stays_compact():
    c = RadixCache(10_000, policy="lru")
    units = [(1, U), (2, U)]
    for t in range(5000):  # lock and unlock the same leaf over and over
        c.now = float(t)
        m = c.match_prefix(units) if t else None
        if m is None or m.tokens == 0:
            assert c.alloc(2 * U)
            c.insert(units)
            continue
        c.inc_lock_ref(m.node)
        c.dec_lock_ref(m.node)
    assert len(c._heap) <= 2 * len(c._evictable_leaves) + 1025
