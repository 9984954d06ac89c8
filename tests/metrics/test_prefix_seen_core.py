"""The compiled set of seen prefix keys (``metrics/_prefix_seen_core.pyx``) answers as its
Python reference (``metrics/prefix_seen.py``): the same matched lengths, chunk after chunk,
with repeated sequences, shared prefixes, key 0, colliding keys and growth of its table."""

from __future__ import annotations

import numpy as np
import pytest

from servesim.compiled import compiled_module
from servesim.metrics.prefix_seen import SeenPrefixes

core = compiled_module("metrics._prefix_seen_core")
pytestmark = pytest.mark.skipif(core is None, reason="compiled core not built")


def _chunk(rng, pool: np.ndarray) -> tuple:
    """Sequences cut from a small pool of keys (so that prefixes repeat), with 0 and huge keys."""
    seqs = []
    for _ in range(int(rng.integers(1, 12))):
        start = int(rng.integers(0, 4))
        seq = pool[start:start + int(rng.integers(1, 40))].copy()
        if rng.random() < 0.3:  # a prefix whose later keys differ (a seen key after an unseen one)
            seq[int(rng.integers(0, seq.size)):] = rng.integers(0, 2**64 - 1, dtype=np.uint64, endpoint=True)
        seqs.append(seq)
    sizes = np.array([a.size for a in seqs], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    limits = np.array([int(rng.integers(0, a.size + 1)) for a in seqs], dtype=np.int64)
    return np.concatenate(seqs), starts, sizes, limits


@pytest.mark.parametrize("seed", range(6))
def test_matched_lengths_equal_the_reference(seed):
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 2**64 - 1, 50, dtype=np.uint64, endpoint=True)
    pool[int(rng.integers(0, 50))] = 0
    pool[int(rng.integers(0, 50))] = 2**64 - 1
    ref, got = SeenPrefixes(), core.SeenPrefixes()
    for _ in range(200):
        args = _chunk(rng, pool)
        assert got.match_chunk(*args).tolist() == ref.match_chunk(*args).tolist()


def test_table_growth_keeps_every_key():
    """Far more keys than the first table holds, many in one probe run (equal high bits)."""
    ref, got = SeenPrefixes(), core.SeenPrefixes()
    keys = (np.arange(300_000, dtype=np.uint64) << np.uint64(40)) | np.uint64(7)
    one = np.array([0], dtype=np.int64)
    args = (keys, one, np.array([keys.size], dtype=np.int64), np.array([0], dtype=np.int64))
    assert got.match_chunk(*args).tolist() == ref.match_chunk(*args).tolist() == [0]
    again = (keys, one, np.array([keys.size], dtype=np.int64), np.array([keys.size], dtype=np.int64))
    assert got.match_chunk(*again).tolist() == ref.match_chunk(*again).tolist() == [keys.size]


@pytest.mark.parametrize("seed", range(6))
def test_sequences_keyed_from_tuples_equal_the_reference(seed):
    """Requests given as prompt and answer tuples with an offset: the compiled keying from the
    tuples matches the reference's arrays, over several calls (keys seen by an earlier one)."""
    rng = np.random.default_rng(seed)
    pool = [int(x) for x in rng.integers(0, 30, 40)] + [2**64 - 1, 0]
    ref, got = SeenPrefixes(), core.SeenPrefixes()
    for _ in range(40):
        prompts, answers = [], []
        for _ in range(int(rng.integers(1, 10))):
            start = int(rng.integers(0, 4))
            prompt = tuple(pool[start:start + int(rng.integers(0, 30))])
            answer = tuple(int(x) for x in rng.integers(0, 2**63, int(rng.integers(0 if prompt else 1, 4))))
            prompts.append(prompt)
            answers.append(answer)
        offsets = rng.choice(np.array([0, 0, 7, 2**64 - 1], dtype=np.uint64), len(prompts))
        limits = np.array([int(rng.integers(0, len(p) + len(a) + 1)) for p, a in zip(prompts, answers)],
                          dtype=np.int64)
        want = ref.match_sequences(prompts, answers, offsets, limits)
        assert got.match_sequences(prompts, answers, offsets, limits).tolist() == want.tolist()
