"""The compiled decode arithmetic equals engines/blockkv/arithmetic.py's numpy versions on random inputs."""

from __future__ import annotations

import numpy as np
import pytest

from servesim.compiled import compiled_module
from servesim.engines.blockkv import arithmetic as blocks
from simharness import python_versions

core = compiled_module("engines._decode_core")
pytestmark = pytest.mark.skipif(core is None, reason="compiled extensions not built")


def _rows(rng: np.random.Generator, n: int) -> np.ndarray:
    """A decode prefix's rows: computed tokens, remaining output (>= 1), recorder rows."""
    return np.stack((rng.integers(0, 9000, n), rng.integers(1, 60, n), rng.permutation(n) * 3)).astype(np.int64)


@pytest.mark.parametrize("seed", range(6))
def test_stretch_within_free_blocks(seed):
    rng = np.random.default_rng(seed)
    for _ in range(200):
        n = int(rng.integers(0, 40))
        computed = rng.integers(0, 5000, n).astype(np.int64)
        bs = int(rng.choice([1, 8, 16, 64]))
        free, limit = int(rng.integers(0, 200)), int(rng.integers(0, 300))
        want = blocks.stretch_within_free_blocks(computed, bs, free, limit)
        assert core.stretch_within_free_blocks(computed, bs, free, limit) == want
        strided = np.repeat(computed, 2)[::2]  # a strided view of the same values
        assert core.stretch_within_free_blocks(strided, bs, free, limit) == want


@pytest.mark.parametrize("seed", range(6))
def test_prefix_rows(seed):
    rng = np.random.default_rng(seed)
    for _ in range(200):
        n = int(rng.integers(0, 40))
        rows = _rows(rng, n)
        assert core.left_min(rows) == blocks.left_min(rows)
        lm = blocks.left_min(rows)
        k = int(rng.integers(1, 70))
        assert core.finishing(rows, k) == blocks.finishing(rows, k)
        reqs = [object() for _ in range(n)]
        got, want = core.advance_rows(rows, k, lm, reqs), blocks.advance_rows(rows, k, lm, reqs)
        np.testing.assert_array_equal(got[0], want[0])
        assert got[0].dtype == want[0].dtype and got[1] == want[1]
        assert got[2] == want[2] == [r for r, left in zip(reqs, rows[1].tolist()) if left > k]
        assert (got[2] is reqs) == (lm > k)  # all kept: the same list


@pytest.mark.parametrize("seed", range(6))
def test_prefix_rows_extended(seed):
    rng = np.random.default_rng(seed)
    for _ in range(100):
        a, b = _rows(rng, int(rng.integers(0, 30))), _rows(rng, int(rng.integers(0, 30)))
        more = [row.tolist() for row in b]
        pairs = ((core.extend_rows(a, *more), blocks.extend_rows(a, *more)),
                 (blocks.extend_rows(a, *more), np.concatenate((a, b), axis=1)))
        for got, want in pairs:
            np.testing.assert_array_equal(got, want)
            assert got.dtype == want.dtype and got.shape == want.shape and got.flags.c_contiguous
    with pytest.raises(ValueError):
        core.extend_rows(_rows(rng, 2), [1, 2], [3], [4, 5])
    with pytest.raises(ValueError):
        core.advance_rows(_rows(rng, 2), 1, 1, [None])


@pytest.mark.parametrize("seed", range(6))
def test_batch_arrays(seed):
    """A pass's recorder rows, decode contexts and leading-decode rows, with and without known decodes."""
    rng = np.random.default_rng(seed)
    for _ in range(200):
        pre = _rows(rng, int(rng.integers(0, 20))) if rng.random() < 0.7 else None
        pre_ctx = None if pre is None else pre[0] + 1
        m = 0 if pre is None else pre.shape[1]
        n_dec = int(rng.integers(0, 20))
        ctx = rng.integers(1, 9000, n_dec).tolist()
        lefts = rng.integers(1, 60, n_dec).tolist()
        idx = (rng.permutation(n_dec + int(rng.integers(0, 10))) * 7 + 1000).tolist()
        lead = int(rng.integers(0, m + n_dec + 1))
        for want_rows in (True, False):
            got = core.batch_arrays(pre, pre_ctx, idx, ctx, lefts, lead, want_rows)
            want = blocks.batch_arrays(pre, pre_ctx, idx, ctx, lefts, lead, want_rows)
            for g, w in zip(got, want):
                if w is None:
                    assert g is None
                    continue
                np.testing.assert_array_equal(g, w)
                assert g.dtype == w.dtype and g.shape == w.shape


@pytest.mark.parametrize("caching", [True, False])
@pytest.mark.parametrize("bs", [1, 16, 64])
def test_decode_due(caching, bs):
    rng = np.random.default_rng(bs)
    for _ in range(200):
        rows = _rows(rng, int(rng.integers(0, 40)))
        computed = rows[0]  # a row of the prefix, as _fast_decodes passes it
        got, want = core.decode_due(computed, bs, caching), blocks.decode_due(computed, bs, caching)
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1:] == want[1:]


def test_engines_use_the_compiled_arithmetic_unless_switched_off():
    assert blocks.decode_arithmetic() is core
    with python_versions():
        assert blocks.decode_arithmetic() is blocks


@pytest.mark.parametrize("seed", range(3))
def test_int64_array_and_index_with(seed):
    rng = np.random.default_rng(seed)
    for _ in range(100):
        values = rng.integers(-2**40, 2**40, int(rng.integers(0, 12))).tolist()
        first = rng.integers(0, 9000, int(rng.integers(0, 12))).astype(np.int64)
        for got, want in ((core.int64_array(values), blocks.int64_array(values)),
                          (core.index_with(first, values), blocks.index_with(first, values)),
                          (core.index_with(first[::2], values), blocks.index_with(first[::2], values)),
                          (core.index_with(None, values), blocks.index_with(None, values))):
            np.testing.assert_array_equal(got, want)
            assert got.dtype == want.dtype == np.int64 and got.flags.c_contiguous


@pytest.mark.parametrize("seed", range(3))
def test_minus_one(seed):
    rng = np.random.default_rng(seed)
    for _ in range(100):
        values = rng.integers(0, 2**40, int(rng.integers(0, 12))).astype(np.int64)
        for arr in (values, values[::2]):  # a strided view too
            got, want = core.minus_one(arr), blocks.minus_one(arr)
            np.testing.assert_array_equal(got, want)
            assert got.dtype == want.dtype == np.int64 and got.flags.c_contiguous and got is not arr


@pytest.mark.parametrize("seed", range(6))
def test_passes_to_block_event(seed):
    rng = np.random.default_rng(seed)
    for _ in range(300):
        n = int(rng.integers(1, 40))
        bs = int(rng.choice([1, 2, 16, 64, 512]))
        computed = rng.integers(0, 130000, n).astype(np.int64)
        if rng.random() < 0.5:  # near block boundaries
            computed = (computed - computed % bs + rng.integers(-2, 1, n)).clip(0)
        for caching in (False, True):
            want = blocks.passes_to_block_event(computed, bs, caching)
            assert core.passes_to_block_event(computed, bs, caching) == want
            assert core.passes_to_block_event(np.repeat(computed, 2)[::2], bs, caching) == want
