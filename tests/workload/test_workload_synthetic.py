"""Synthetic traffic: distributions, arrival processes, prefixes and multi-turn sessions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servesim.workload import build_source, parse_workload, sequence_units


def synthetic(**kw):
    base = {
        "kind": "synthetic",
        "num_requests": 2000,
        "arrival": {"process": "poisson", "rate": 4.0},
        "input": {"dist": "fixed", "value": 1000},
        "output": {"dist": "fixed", "value": 50},
    }
    return parse_workload({**base, **kw})


def requests(cfg, seed=0):
    return list(build_source(cfg, seed).requests())


def gaps(reqs):
    return np.diff([r.arrival for r in reqs])


def test_indices_order_and_first_arrival():
    reqs = requests(synthetic())
    assert [r.index for r in reqs] == list(range(2000))
    assert reqs[0].arrival == 0.0
    assert np.all(gaps(reqs) >= 0)
    assert all(r.after is None and r.session_id is None for r in reqs)


def test_poisson_mean_interarrival():
    g = gaps(requests(synthetic(num_requests=20000)))
    assert g.mean() == pytest.approx(0.25, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(1.0, rel=0.05)


def test_constant_arrivals():
    reqs = requests(synthetic(num_requests=5, arrival={"process": "constant", "rate": 2}))
    assert [r.arrival for r in reqs] == [0.0, 0.5, 1.0, 1.5, 2.0]


def test_gamma_burstiness_is_cv():
    cvs = []
    for b in (0.5, 1.0, 3.0):
        g = gaps(requests(synthetic(num_requests=20000, arrival={"process": "gamma", "rate": 4, "burstiness": b})))
        assert g.mean() == pytest.approx(0.25, rel=0.1)
        cvs.append(g.std() / g.mean())
    assert cvs[0] == pytest.approx(0.5, rel=0.1)
    assert cvs[1] == pytest.approx(1.0, rel=0.1)
    assert cvs[0] < cvs[1] < cvs[2]


@pytest.mark.parametrize(
    "dist, mean",
    [
        ({"dist": "uniform", "low": 100, "high": 200}, 150),
        ({"dist": "normal", "mean": 500, "std": 100}, 500),
        ({"dist": "lognormal", "median": 300, "sigma": 0.5}, 300 * math.exp(0.125)),
        ({"dist": "lognormal", "mean": 300, "sigma": 0.5}, 300),
        ({"dist": "exponential", "mean": 400}, 400),
    ],
)
def test_length_means(dist, mean):
    reqs = requests(synthetic(num_requests=20000, input=dist))
    ins = np.array([r.input_length for r in reqs])
    assert ins.mean() == pytest.approx(mean, rel=0.03)
    assert ins.dtype.kind == "i" and ins.min() >= 1


def test_uniform_lengths_are_inclusive_integers():
    reqs = requests(synthetic(num_requests=3000, output={"dist": "uniform", "low": 3, "high": 5}))
    assert {r.output_length for r in reqs} == {3, 4, 5}


def test_clipping():
    reqs = requests(synthetic(input={"dist": "normal", "mean": 100, "std": 200, "min": 20, "max": 150}))
    ins = [r.input_length for r in reqs]
    assert min(ins) == 20 and max(ins) == 150
    reqs = requests(synthetic(output={"dist": "normal", "mean": 0, "std": 5}))
    assert min(r.output_length for r in reqs) == 1  # min defaults to 1


def test_hash_ids_cover_prompt_and_are_unique_without_prefix():
    reqs = requests(synthetic(input={"dist": "uniform", "low": 1, "high": 3000}))
    assert all(len(r.hash_ids) == -(-r.input_length // 512) for r in reqs)
    ids = [i for r in reqs for i in r.hash_ids]
    assert len(ids) == len(set(ids)) and min(ids) >= 0


def test_prefix_share_and_groups():
    prefix = {"num_groups": 3, "length": 1300, "share": 0.4}
    reqs = requests(synthetic(num_requests=5000, prefix=prefix, input={"dist": "uniform", "low": 500, "high": 3000}))
    firsts = {}
    for r in reqs:
        firsts.setdefault(r.hash_ids[:2], []).append(r)
    shared = {k: v for k, v in firsts.items() if len(v) > 1}
    assert len(shared) == 3  # two full blocks per group (1300 // 512)
    n_shared = sum(len(v) for v in shared.values())
    assert n_shared / 5000 == pytest.approx(0.4, abs=0.03)
    for group in shared.values():
        assert all(r.input_length >= 1301 for r in group)  # raised above the prefix
        third = [r.hash_ids[2] for r in group]
        assert len(set(third)) == len(third)  # the block where the prefix ends is private


def test_deterministic_per_seed():
    cfg = synthetic(
        input={"dist": "lognormal", "median": 800, "sigma": 1},
        prefix={"num_groups": 2, "length": 600, "share": 0.5},
        sessions={"turns": {"dist": "uniform", "low": 1, "high": 4},
                  "think_time_s": {"dist": "exponential", "mean": 3},
                  "new_input": {"dist": "uniform", "low": 10, "high": 400}},
    )
    # repr, because later turns have arrival = nan and nan != nan
    assert repr(requests(cfg, 5)) == repr(requests(cfg, 5))
    assert repr(requests(cfg, 5)) != repr(requests(cfg, 6))


def test_chunk_boundaries_do_not_break_streams(monkeypatch):
    from servesim.workload import synthetic as mod

    monkeypatch.setattr(mod, "CHUNK_SESSIONS", 7)
    reqs = requests(synthetic(num_requests=100))
    assert [r.index for r in reqs] == list(range(100))
    assert np.all(gaps(reqs) > 0)


SESSIONS = {
    "turns": {"dist": "uniform", "low": 1, "high": 6},
    "think_time_s": {"dist": "uniform", "low": 1, "high": 2},
    "new_input": {"dist": "uniform", "low": 1, "high": 700},
}


def check_sessions(reqs, block_size):
    by_index = {r.index: r for r in reqs}
    last_first_arrival = 0.0
    for r in reqs:
        if r.after is None:
            assert r.turn == 0 and r.arrival >= last_first_arrival
            last_first_arrival = r.arrival
            continue
        prev = by_index[r.after]
        assert prev.index < r.index and prev.session_id == r.session_id and r.turn == prev.turn + 1
        assert math.isnan(r.arrival) and 1 <= r.delay <= 2
        seq = prev.input_length + prev.output_length
        assert r.input_length > seq
        prev_units = sequence_units(prev, seq)
        units = sequence_units(r, r.input_length)
        n_full = seq // block_size
        assert units[:n_full] == prev_units[:n_full]
        # nothing beyond the fully covered blocks is shared, with the previous turn or
        # any other request
        assert not {u[0] for u in units[n_full:]} & {u[0] for u in prev_units}
        assert len(r.hash_ids) == -(-r.input_length // block_size)


def test_sessions_chain_and_reuse_blocks():
    reqs = requests(synthetic(num_requests=3000, sessions=SESSIONS))
    assert len(reqs) == 3000
    check_sessions(reqs, 512)
    turns = [r.turn for r in reqs]
    assert max(turns) == 5
    # sessions are contiguous: a session's turns follow its first turn directly
    for a, b in zip(reqs, reqs[1:]):
        if b.turn > 0:
            assert b.after == a.index


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    block_size=st.sampled_from([1, 16, 100, 512]),
    n=st.integers(1, 60),
)
def test_sessions_property(seed, block_size, n):
    cfg = synthetic(
        num_requests=n,
        block_size=block_size,
        input={"dist": "uniform", "low": 1, "high": 1500},
        output={"dist": "uniform", "low": 1, "high": 900},
        prefix={"num_groups": 2, "length": 300, "share": 0.5},
        sessions=SESSIONS,
    )
    reqs = requests(cfg, seed)
    assert len(reqs) == n
    check_sessions(reqs, block_size)


def test_lengths_stay_within_max_tokens_however_wide_the_distribution():
    """A wide lognormal or a huge fixed value once overflowed int64 into negative lengths."""
    import numpy as np

    from servesim.workload.config import parse_workload as _parse
    from servesim.workload.distributions import sample_lengths
    from servesim.workload.request import MAX_TOKENS

    wide = _parse({"kind": "synthetic", "num_requests": 1, "arrival": {"process": "poisson", "rate": 1},
                   "input": {"dist": "lognormal", "median": 100, "sigma": 50},
                   "output": {"dist": "fixed", "value": 1e19}})
    rng = np.random.default_rng(0)
    lengths = sample_lengths(wide.input, rng, 10_000)
    assert lengths.min() >= 1 and lengths.max() == MAX_TOKENS  # the tail is clipped, not wrapped
    assert (sample_lengths(wide.output, rng, 3) == MAX_TOKENS).all()


def test_lengths_above_max_tokens_are_config_errors():
    from pydantic import ValidationError

    from servesim.workload.config import parse_workload as _parse

    for bad in ({"kind": "closed_loop", "recipe": "fixed", "concurrency": 1, "isl": 10**9, "osl": 10},
                {"kind": "synthetic", "num_requests": 1, "arrival": {"process": "poisson", "rate": 1},
                 "input": {"dist": "fixed", "value": 10, "max": 10**9}, "output": {"dist": "fixed", "value": 1}}):
        with pytest.raises(ValidationError, match="100000000"):
            _parse(bad)
