"""The compiled SGLang running batch gives the numpy reference's results for any operation sequence."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest

from servesim.compiled import compiled_module
from servesim.engines.sglang.batch import NO_LIMIT, RunningBatch

core = compiled_module("engines._sglang_batch_core")
needs_core = pytest.mark.skipif(core is None, reason="compiled extensions not built")


def sgreq(index: int, computed: int, generated: int, max_new: int, prefix: int) -> SimpleNamespace:
    """The fields of an ``SGReq`` the batch reads and writes back."""
    return SimpleNamespace(req=SimpleNamespace(index=index), computed=computed, generated=generated,
                           max_new=max_new, prefix=prefix, alloc=-1)


def _fields(sr) -> tuple:
    return sr.req.index, sr.computed, sr.generated, sr.alloc


def _same_state(a, b) -> None:
    assert a.n == b.n == len(a.reqs) == len(b.reqs)
    assert [sr.req.index for sr in a.reqs] == [sr.req.index for sr in b.reqs] == a.indices().tolist()
    np.testing.assert_array_equal(a.indices(), b.indices())
    for x, y in zip(a.columns(), b.columns()):
        np.testing.assert_array_equal(x, y)


def _run_ops(seed: int, page: int) -> None:
    rng = random.Random(seed)
    ref, fast = RunningBatch(capacity=4), core.RunningBatch(4)  # small: growth is exercised
    next_index = 0
    for _ in range(400):
        op = rng.random()
        if op < 0.3 or ref.n == 0:
            comp = rng.randrange(0, 5000)
            gen = rng.randrange(0, 50)
            row = (next_index, comp, gen, gen + rng.randrange(1, 300), rng.randrange(0, comp + 1))
            next_index += 1
            ref.append(sgreq(*row))
            fast.append(sgreq(*row))
        elif op < 0.6:
            k = rng.randrange(1, 40)
            assert ref.advance(k, page) == fast.advance(k, page)
        elif op < 0.75:
            assert [_fields(sr) for sr in ref.remove_done(page)] == [_fields(sr) for sr in fast.remove_done(page)]
        elif op < 0.78:
            ref.clear()
            fast.clear()
        elif op < 0.82:
            ref.sync(page)
            fast.sync(page)
            assert [_fields(sr) for sr in ref.reqs] == [_fields(sr) for sr in fast.reqs]
        else:
            clip = rng.choice([1, 16, 4096])
            assert ref.reserve(clip) == fast.reserve(clip)
        assert ref.left_min() == fast.left_min()
        assert ref.outstanding() == fast.outstanding()
        assert ref.decode_need(page) == fast.decode_need(page)
        np.testing.assert_array_equal(ref.contexts(), fast.contexts())
        _same_state(ref, fast)


@needs_core
@pytest.mark.parametrize("page", [1, 16, 64])
@pytest.mark.parametrize("seed", range(4))
def test_compiled_batch_matches_reference(seed, page):
    _run_ops(seed, page)


@pytest.mark.parametrize("make", [RunningBatch, pytest.param(lambda: core.RunningBatch(), marks=needs_core)])
def test_batch_semantics(make):
    b = make()
    assert b.left_min() == NO_LIMIT and b.n == 0
    reqs = b.reqs
    first, second = sgreq(7, 15, 0, 3, 0), sgreq(9, 40, 1, 10, 32)  # 7: the next pass crosses a 16-token page
    b.append(first)
    b.append(second)
    assert b.left_min() == 3 and b.reserve(4) == 3 + 4 and b.outstanding() == 3 + 9
    assert b.decode_need(16) == 0 and b.decode_need(1) == 2
    assert b.advance(3, 16) == 16  # passes 2..3: request 7's KV grows past 16 (a page); 9's stays within 48
    assert (first.computed, first.generated) == (15, 0)  # progress lives in the batch until written back
    assert b.remove_done(16) == [first]
    assert (first.computed, first.generated, first.alloc) == (18, 3, 32)  # ceil_page(18) - prefix 0
    assert b.n == 1 and b.indices().tolist() == [9] and b.left_min() == 6
    assert b.reqs is reqs and reqs == [second]  # changed in place: the engine keeps a reference
    comp, gen, max_new, prefix = b.columns()
    assert (comp.tolist(), gen.tolist(), max_new.tolist(), prefix.tolist()) == ([43], [4], [10], [32])
    b.sync(16)
    assert (second.computed, second.generated, second.alloc) == (43, 4, 48 - 32)
    b.clear()
    assert b.n == 0 and reqs == []
