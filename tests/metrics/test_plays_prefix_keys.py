"""The plays table's prefix keys (``metrics/prefix_seen.py``) computed for many sequences at
once equal each sequence's own."""

from __future__ import annotations

import numpy as np
import pytest

from servesim.metrics.prefix_seen import PrefixKeys as _PrefixKeys


@pytest.mark.parametrize("seed", range(5))
def test_many_sequences_keys_are_each_sequences_keys(seed):
    rng = np.random.default_rng(seed)
    keys_of = _PrefixKeys(60)
    for _ in range(50):
        seqs = [rng.integers(0, 2**64 - 1, int(rng.integers(1, 60)), dtype=np.uint64, endpoint=True)
                for _ in range(int(rng.integers(1, 8)))]
        keys, starts = keys_of.many(seqs)
        assert keys.dtype == np.uint64 and keys.size == sum(a.size for a in seqs)
        for seq, start in zip(seqs, starts.tolist()):
            assert keys[start:start + seq.size].tolist() == keys_of(seq).tolist()
