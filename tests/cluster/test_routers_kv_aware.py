"""The KV-aware router's decisions, from a KV index fed by events."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from servesim.cluster.kv_index import KVIndex
from servesim.cluster.routers import build_router
from servesim.engines.base import EngineSnapshot
from servesim.kvcache.events import KVEvent
from servesim.workload.request import Request

BS = 512


def fake_worker(outstanding: int = 0, kv_used: int = 0):
    snap = EngineSnapshot(running=0, waiting=0, kv_used_tokens=kv_used, kv_capacity_tokens=10**6,
                          prompt_tokens=0, cached_prompt_tokens=0, outstanding_tokens=outstanding)
    return SimpleNamespace(engine=SimpleNamespace(snapshot=lambda: snap), busy=False)


def req(hash_ids, i=0) -> Request:
    return Request(index=i, request_id=str(i), arrival=0.0, input_length=len(hash_ids) * BS, output_length=10,
                   hash_ids=tuple(hash_ids), block_size=BS)


def store(idx: KVIndex, worker: int, ids, t: float = 0.0) -> None:
    idx.sink(worker)(KVEvent("stored", tuple(ids), len(ids) * BS, time=t,
                             segments=tuple((b, 0, BS) for b in ids)))


def test_picks_the_worker_holding_the_longest_prefix():
    idx = KVIndex()
    store(idx, 0, [1])
    store(idx, 1, [1, 2, 3])
    store(idx, 2, [1, 2])
    ws = [fake_worker() for _ in range(4)]
    r = build_router("kv_aware", 0, None, idx)
    assert r.choose(req([1, 2, 3, 4]), ws, 0.0) == 1
    assert r.last_overlaps == [1, 3, 2, 0]
    assert r.last_costs == [3.0, 1.0, 2.0, 4.0]


def test_load_outweighs_a_short_overlap():
    idx = KVIndex()
    store(idx, 0, [1, 2])
    # Worker 0 holds 2 of 4 blocks but has 6 blocks of outstanding work: cost 2 + 6 = 8;
    # worker 1 holds nothing and is idle: cost 4.
    ws = [fake_worker(outstanding=6 * BS), fake_worker()]
    r = build_router("kv_aware", 0, None, idx)
    assert r.choose(req([1, 2, 3, 4]), ws, 0.0) == 1
    # A larger overlap weight makes the cached prefix worth more.
    r = build_router("kv_aware", 0, {"overlap_weight": 4.0}, idx)
    assert r.choose(req([1, 2, 3, 4]), ws, 0.0) == 0  # 4*2 + 6 = 14 < 4*4 = 16


def test_decode_load_kv_uses_kv_in_use():
    idx = KVIndex()
    ws = [fake_worker(outstanding=0, kv_used=10 * BS), fake_worker(outstanding=10 * BS, kv_used=0)]
    assert build_router("kv_aware", 0, {"decode_load": "kv"}, idx).choose(req([1]), ws, 0.0) == 1
    assert build_router("kv_aware", 0, {"decode_load": "outstanding"}, idx).choose(req([1]), ws, 0.0) == 0


def test_events_are_seen_only_after_the_delay():
    idx = KVIndex(delay=2.0)
    store(idx, 1, [1, 2, 3], t=0.0)
    ws = [fake_worker(), fake_worker()]
    r = build_router("kv_aware", 0, None, idx)
    assert r.choose(req([1, 2, 3]), ws, 1.0) == 0  # not visible yet: a tie, first in turn
    assert r.last_overlaps == [0, 0]
    assert r.choose(req([1, 2, 3]), ws, 2.0) == 1
    assert r.last_overlaps == [0, 3]


def test_ties_rotate_deterministically():
    ws = [fake_worker() for _ in range(3)]
    r = build_router("kv_aware", 0, None, KVIndex())
    assert [r.choose(req([9]), ws, 0.0) for _ in range(4)] == [0, 1, 2, 0]


def test_temperature_sampling_reproducible_by_seed():
    idx = KVIndex()
    store(idx, 2, [1, 2, 3, 4])
    ws = [fake_worker() for _ in range(4)]

    def picks(seed, temperature):
        r = build_router("kv_aware", seed, {"temperature": temperature}, idx)
        return [r.choose(req([1, 2, 3, 4]), ws, 0.0) for _ in range(300)]

    a = picks(11, 2.0)
    assert a == picks(11, 2.0)
    assert a != picks(12, 2.0)
    # Costs [4, 4, 0, 4]: P(worker 2) = 1 / (1 + 3 e^-2) ~ 0.71.
    share = a.count(2) / len(a)
    assert share == pytest.approx(1 / (1 + 3 * 2.718281828 ** -2), abs=0.08)
    assert set(a) == {0, 1, 2, 3}
    # A very low temperature is (almost surely) argmin.
    assert set(picks(11, 0.01)) == {2}
