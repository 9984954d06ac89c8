"""Unit tests of the SGLang-style radix cache: match, insert, split, locks, eviction, pages."""

from __future__ import annotations

import random

import pytest

from servesim.kvcache import KVEvent, RadixCache
from servesim.kvcache.lazy_heap import new_lazy_heap

U = 8  # trace block size used by these tests' units


def seq(*ids: int, last: int = U) -> list[tuple[int, int]]:
    """Units for consecutive blocks ``ids``, the last one holding ``last`` tokens."""
    return [(b, U) for b in ids[:-1]] + [(ids[-1], last)]


def admit(cache: RadixCache, units, n=None):
    """Drive a request the way an engine does: match, lock, allocate the rest."""
    total = sum(k for _, k in units) if n is None else n
    m = cache.match_prefix(units, total)
    cache.inc_lock_ref(m.node)
    assert cache.alloc(total - m.tokens)
    return m, total


def finish(cache: RadixCache, units, m, total):
    cache.cache_finished(units, total, m.tokens, m.node)
    cache.check_invariants()


def test_empty_match_and_insert():
    c = RadixCache(100)
    assert c.match_prefix(seq(1, 2)).tokens == 0
    m, t = admit(c, seq(1, 2))
    finish(c, seq(1, 2), m, t)
    assert c.total_size == 16 and c.evictable_size == 16 and c.protected_size == 0
    assert c.match_prefix(seq(1, 2)).tokens == 16
    assert c.match_prefix(seq(1, 3)).tokens == 8
    assert c.match_prefix(seq(2, 1)).tokens == 0
    assert c.pool.free_tokens == 84


def test_insert_returns_present_prefix_and_frees_duplicates():
    c = RadixCache(100)
    a, ta = admit(c, seq(1, 2))
    b, tb = admit(c, seq(1, 2, 3))  # both miss: both compute block 1, 2
    finish(c, seq(1, 2), a, ta)
    assert c.pool.private_tokens == 24
    assert c.insert(seq(1, 2, 3)) == 16  # 16 already present -> duplicates
    c.free(16)  # what cache_finished would do
    c.dec_lock_ref(b.node)
    c.check_invariants()
    assert c.total_size == 24 and c.pool.private_tokens == 0


def test_split_mid_key_and_mid_block():
    c = RadixCache(100)
    m, t = admit(c, seq(1, 2, 3))
    finish(c, seq(1, 2, 3), m, t)
    # diverge after 1.5 blocks: same block 2 but only 4 tokens of it, then nothing
    m2 = c.match_prefix(seq(1, 2, last=4))
    assert m2.tokens == 12
    assert m2.node.key == [(1, 0, 8), (2, 0, 4)]
    child = next(iter(m2.node.children.values()))
    assert child.key == [(2, 4, 8), (3, 0, 8)]
    c.check_invariants()
    # a sequence that shares block 1 then diverges: split at block boundary
    m3, t3 = admit(c, seq(1, 9))
    assert m3.tokens == 8 and m3.node.key == [(1, 0, 8)]
    finish(c, seq(1, 9), m3, t3)
    assert sorted(m3.node.children) == [2, 9]
    # a partial last block that later gets extended by a longer sequence
    m4, t4 = admit(c, seq(5, last=3))
    finish(c, seq(5, last=3), m4, t4)
    m5, t5 = admit(c, seq(5, 6))
    assert m5.tokens == 3
    finish(c, seq(5, 6), m5, t5)
    node = c.root.children[5]
    assert node.key == [(5, 0, 3)]
    assert node.children[5].key == [(5, 3, 8), (6, 0, 8)]
    assert c.match_prefix(seq(5, 6)).tokens == 16


def test_lock_protects_from_eviction():
    c = RadixCache(32)
    m, t = admit(c, seq(1, 2))
    finish(c, seq(1, 2), m, t)
    held = c.match_prefix(seq(1, 2))
    c.inc_lock_ref(held.node)
    assert c.protected_size == 16 and c.evictable_size == 0
    assert c.evict(100) == 0
    assert c.match_prefix(seq(1, 2)).tokens == 16
    c.dec_lock_ref(held.node)
    assert c.evictable_size == 16
    assert c.evict(1) == 16  # whole leaf node goes
    assert c.total_size == 0 and c.pool.free_tokens == 32
    c.check_invariants()
    with pytest.raises(RuntimeError):
        c.dec_lock_ref(held.node)  # node no longer in the tree


def test_evict_lru_order_and_parent_cascade():
    c = RadixCache(100)
    for i, ids in enumerate([(1, 2), (1, 3), (4,)]):
        c.now = float(i)
        m, t = admit(c, seq(*ids))
        finish(c, seq(*ids), m, t)
    c.now = 10.0
    c.match_prefix(seq(1, 2))  # refresh (1,2): leaf LRU order now (3), (4), (2)
    assert c.evict(1) == 8
    assert 3 not in c.root.children[1].children
    assert c.evict(1) == 8
    assert 4 not in c.root.children
    assert c.match_prefix(seq(1, 2)).tokens == 16
    c2 = RadixCache(100)
    for i, ids in enumerate([(1, 2), (4,)]):
        m, t = admit(c2, seq(*ids))
        finish(c2, seq(*ids), m, t)
    # evicting everything cascades: leaf (2) then its parent (1) once childless
    assert c2.evict(1000) == 24
    assert c2.total_size == 0 and not c2.root.children
    c2.check_invariants()


def test_lru_evicts_least_recent_leaf_first():
    c = RadixCache(100)
    for ids in [(1,), (2,), (3,)]:
        m, t = admit(c, seq(*ids))
        finish(c, seq(*ids), m, t)
    c.match_prefix(seq(1))
    c.evict(8)
    assert 2 not in c.root.children and 1 in c.root.children and 3 in c.root.children


def test_page_alignment_page16():
    c = RadixCache(1000, page_size=16)
    units = [(1, 512), (2, 40)]  # 552 tokens: 34 full pages + 8 tokens
    m = c.match_prefix(units)
    c.inc_lock_ref(m.node)
    assert c.alloc(552)
    c.cache_finished(units, 552, m.tokens, m.node)
    assert c.total_size == 544  # unaligned tail freed
    assert c.pool.free_tokens == 1000 - 544 and c.pool.private_tokens == 0
    # a match is page aligned: 530 shared tokens -> 528
    assert c.match_prefix([(1, 512), (2, 18)]).tokens == 528
    assert c.match_prefix([(1, 512), (9, 18)]).tokens == 512
    c.check_invariants()
    # both splits happened at page boundaries: 512 | 16 | 16
    node = c.root.children[1]
    assert node.ntok == 512
    assert node.children[2].key == [(2, 0, 16)]
    assert node.children[2].children[2].key == [(2, 16, 32)]


def test_page_conservation_through_many_requests():
    c = RadixCache(2000, page_size=16)
    active = []
    for i in range(30):
        units = [(i % 3, 512), (100 + i % 5, 17 + 13 * i % 400)]
        total = sum(n for _, n in units)
        m = c.match_prefix(units, total - 1)
        c.inc_lock_ref(m.node)
        if not c.alloc(total - m.tokens):
            c.dec_lock_ref(m.node)
            continue
        active.append((units, total, m))
        c.check_invariants()
        if len(active) > 2:
            u, t, mm = active.pop(0)
            c.cache_finished(u, t, mm.tokens, mm.node)
            c.check_invariants()
    for u, t, mm in active:
        c.cache_finished(u, t, mm.tokens, mm.node)
    c.check_invariants()
    assert c.pool.private_tokens == 0
    assert c.pool.free_tokens + c.total_size == 2000


def test_cache_unfinished_moves_lock():
    c = RadixCache(100)
    units = seq(1, 2, 3)
    m, t = admit(c, units)
    m = c.cache_unfinished(units, 12, m.tokens, m.node)  # first chunk of 12 computed
    assert m.tokens == 12 and c.protected_size == 12
    assert c.pool.private_tokens == 12
    c.check_invariants()
    finish(c, units, m, t)
    assert c.total_size == 24 and c.protected_size == 0


def test_disable_mode():
    c = RadixCache(50, disable=True)
    m, t = admit(c, seq(1, 2))
    c.cache_finished(seq(1, 2), t, m.tokens, m.node)
    assert c.total_size == 0 and c.pool.free_tokens == 50
    assert c.match_prefix(seq(1, 2)).tokens == 0
    c.check_invariants()


def test_alloc_evicts_when_short():
    c = RadixCache(24)
    m, t = admit(c, seq(1, 2))
    finish(c, seq(1, 2), m, t)
    assert c.available_tokens == 24
    assert c.alloc(20)
    assert c.total_size == 0
    assert not c.alloc(10)
    c.check_invariants()


def test_events():
    events: list[KVEvent] = []
    c = RadixCache(100, on_event=events.append)
    m, t = admit(c, seq(1, 2, last=3))
    finish(c, seq(1, 2, last=3), m, t)
    assert events[-1].kind == "stored" and events[-1].block_hashes == (1, 2) and events[-1].tokens == 11
    assert events[-1].segments == ((1, 0, 8), (2, 0, 3))
    c.evict(100)
    assert events[-1].kind == "removed" and events[-1].tokens == 11
    assert events[-1].stamped(1.5, 3).worker == 3


def _nodes(cache: RadixCache) -> list:
    """Every node with what eviction policies read: key, access stamps, locks."""
    out, stack = [], [cache.root]
    while stack:
        node = stack.pop()
        out.append((node.uid, tuple(node.key), node.last_access, node.last_seq, node.access_count,
                    node.insert_seq, node.lock_ref, sorted(node.children)))
        stack.extend(node.children.values())
    return sorted(out)


@pytest.mark.parametrize("page", [1, 4])
@pytest.mark.parametrize("seed", range(6))
def test_insert_and_match_equals_insert_then_match(seed, page):
    """The fused call leaves every node, stamp and counter as insert followed by match_prefix."""
    import random

    rng = random.Random(seed)
    a, b = RadixCache(10_000, page_size=page), RadixCache(10_000, page_size=page)
    for step in range(300):
        units = seq(*[rng.randrange(4) if k < 2 else rng.randrange(30) for k in range(rng.randint(1, 6))],
                    last=rng.randint(1, U))
        n = rng.randint(0, sum(k for _, k in units))
        a.now = b.now = float(step)
        if rng.random() < 0.3:  # plain matches and inserts in between, as engines make them
            assert a.match_prefix(units, n).tokens == b.match_prefix(units, n).tokens
        else:  # a request's private KV for the tokens moves into the tree; its duplicates are freed
            aligned = n - n % page
            assert a.alloc(aligned) and b.alloc(aligned)
            present = a.insert(units, n)
            ref = a.match_prefix(units, n)
            got_present, got = b.insert_and_match(units, n)
            assert (got_present, got.tokens, got.node.uid) == (present, ref.tokens, ref.node.uid)
            a.free(present)
            b.free(present)
        assert _nodes(a) == _nodes(b)
        assert (a.evictable_size, a.pool.free_tokens, a._seq) == (b.evictable_size, b.pool.free_tokens, b._seq)


def _segments_after(units, prefix: int, n: int) -> list:
    """Tokens ``[prefix, n)`` of ``units`` as segments (what ``sequence_segments`` gives a request)."""
    segs, off = [], 0
    for bid, k in units:
        first, end = max(prefix - off, 0), min(n - off, k)
        if first < end:
            segs.append((bid, first, end))
        off += k
    return segs


@pytest.mark.parametrize("page", [1, 4])
@pytest.mark.parametrize("seed", range(6))
def test_insert_after_a_locked_node_equals_inserting_from_the_root(seed, page):
    """Requests lock their match, then insert longer prefixes of their sequence (as SGLang's
    unfinished and finished requests do): walking from the locked node, given only the
    tokens after it (``insert_after``), leaves every node, stamp, counter, lock and the
    eviction order as inserting the whole sequence from the root."""
    rng = random.Random(seed)
    a, c = RadixCache(600, page_size=page), RadixCache(600, page_size=page)
    live = []  # (units, locked tokens, node in a, node in c) of requests holding a lock
    walks_below = 0
    for step in range(400):
        a.now = c.now = float(step)
        if live and rng.random() < 0.5:
            units, prefix, na, nc = live.pop(rng.randrange(len(live)))
            total = sum(k for _, k in units)
            n = rng.randint(prefix, total)
            n -= n % page
            if n > prefix:
                walks_below += prefix > 0
                assert a.alloc(n - prefix) and c.alloc(n - prefix)
                tail = _segments_after(units, prefix, n)
                end = n if rng.random() < 0.5 else -1  # the end given, or counted
                if rng.random() < 0.5:
                    pa, pc = a.insert(units, n), c.insert_after(tail, nc, prefix, end)
                    ma = mc = None
                else:
                    pa, ma = a.insert_and_match(units, n)
                    pc, mc = c.insert_after_and_match(tail, nc, prefix, end)
                    assert (ma.tokens, ma.node.uid) == (mc.tokens, mc.node.uid)
                assert pa == pc
                a.free(max(pa - prefix, 0))
                c.free(max(pc - prefix, 0))
                if ma is not None and rng.random() < 0.5:  # the lock moves to the new end
                    a.inc_lock_ref(ma.node)
                    c.inc_lock_ref(mc.node)
                    a.dec_lock_ref(na)
                    c.dec_lock_ref(nc)
                    live.append((units, ma.tokens, ma.node, mc.node))
                    continue
            a.dec_lock_ref(na)
            c.dec_lock_ref(nc)
        else:
            units = seq(*[rng.randrange(3) if k < 2 else rng.randrange(20) for k in range(rng.randint(1, 6))],
                        last=rng.randint(1, U))
            n = sum(k for _, k in units)
            ma, mc = a.match_prefix(units, n), c.match_segments(_segments_after(units, 0, n - n % page))
            assert ma.tokens == mc.tokens
            a.inc_lock_ref(ma.node)
            c.inc_lock_ref(mc.node)
            live.append((units, ma.tokens, ma.node, mc.node))
        if rng.random() < 0.2:
            k = rng.randint(1, 60)
            assert a.evict(k) == c.evict(k)
        assert _nodes(a) == _nodes(c)
        assert (a.evictable_size, a.pool.free_tokens, a._seq) == (c.evictable_size, c.pool.free_tokens, c._seq)
        assert all(node.ntok == sum(e - b for _, b, e in node.key) for node in _all_nodes(c))
    assert walks_below > 20


def _all_nodes(cache: RadixCache) -> list:
    out, stack = [], [cache.root]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children.values())
    return out


@pytest.mark.parametrize("policy", ["lru", "lfu", "fifo"])
def test_lazy_heap_keys_are_the_policys_keys(policy):
    """The lazy eviction heap reads its keys from the nodes (``_lazy_push``, ``_lazy_current``):
    they must order as the policy's own keys for every node, after inserts, hits and splits."""
    rng = random.Random(7)
    c = RadixCache(400, policy=policy)
    assert c._lazy
    for step in range(60):
        c.now = float(step)
        ids = tuple(rng.randint(1, 6) for _ in range(rng.randint(1, 4)))
        m, t = admit(c, seq(*ids))
        finish(c, seq(*ids), m, t)
        if rng.random() < 0.3:
            c.evict(rng.randint(1, 40))
    nodes, stack = [], [c.root]
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node.children.values())
    assert len(nodes) > 5
    for node in nodes:
        key = c.policy.key(node, 0.0)
        pair = key if isinstance(key, tuple) else (key, 0)  # LFU's key is (count, seq) already
        c._heap = heap = new_lazy_heap()
        c._lazy_push(node)
        assert heap.pop() is node and (heap.k1, heap.k2) == pair
        assert c._lazy_current(node, *pair)
        assert not c._lazy_current(node, pair[0] - 1, pair[1])


@pytest.mark.parametrize("page", [1, 4])
@pytest.mark.parametrize("seed", range(6))
def test_match_request_is_match_of_its_segments(page, seed):
    """``match_request`` (the walk reading a request's block ids as it goes) gives the result,
    splits, stamps and eviction order of ``match_segments`` of the request's built segments,
    with prompt ids, answer ids and ids of the request alone, stops inside a block or not."""
    from servesim.workload.request import Request, sequence_segments

    rng = random.Random(seed)
    a, c = RadixCache(900, page_size=page), RadixCache(900, page_size=page)
    bs = page * [1, 2, 4][seed % 3]  # one block grid per tree, in whole pages
    live = []
    for step in range(300):
        a.now = c.now = float(step)
        ids = tuple(rng.randrange(3) if k < 2 else rng.randrange(12) for k in range(rng.randint(0, 6)))
        out = tuple(rng.randrange(12) for _ in range(rng.randint(0, 2)))
        req = Request(rng.randrange(4), "r", 0.0, max(1, len(ids) * bs), 5, ids, bs, output_hash_ids=out)
        stop = rng.randint(-2, (len(ids) + len(out) + 2) * bs)
        stop -= stop % page
        ma, mc = a.match_segments(sequence_segments(req, 0, stop)), c.match_request(req, stop)
        assert (ma.tokens, ma.node.uid) == (mc.tokens, mc.node.uid)
        if rng.random() < 0.5 and stop > ma.tokens:  # the rest of the request goes into the tree
            assert a.alloc(stop - ma.tokens) and c.alloc(stop - mc.tokens)
            pa = a.insert_segments(sequence_segments(req, 0, stop))
            pc = c.insert_segments(sequence_segments(req, 0, stop))
            assert pa == pc
            a.free(max(pa - ma.tokens, 0))
            c.free(max(pc - mc.tokens, 0))
        if rng.random() < 0.3:
            a.inc_lock_ref(ma.node)
            c.inc_lock_ref(mc.node)
            live.append((ma.node, mc.node))
        if live and rng.random() < 0.3:
            na, nc = live.pop(rng.randrange(len(live)))
            a.dec_lock_ref(na)
            c.dec_lock_ref(nc)
        if rng.random() < 0.2:
            k = rng.randint(1, 60)
            assert a.evict(k) == c.evict(k)
        assert _nodes(a) == _nodes(c)
        assert (a.evictable_size, a.pool.free_tokens, a._seq) == (c.evictable_size, c.pool.free_tokens, c._seq)


@pytest.mark.parametrize("page", [1, 4])
@pytest.mark.parametrize("seed", range(6))
def test_request_runs_as_keys_equal_segment_keys(page, seed):
    """Nodes that keep a request's run (``insert_request_after``) behave as nodes that keep its
    segments (``insert_after`` of ``sequence_segments``): the same keys read back, splits,
    stamps, events, eviction order, under every kind of match (a request's, a segment list's,
    units') and with host-tier paths read back at eviction."""
    from servesim.workload.request import Request, sequence_segments, sequence_units

    rng = random.Random(100 + seed)
    ev_a, ev_c, out_a, out_c = [], [], [], []
    a = RadixCache(700, page_size=page, on_event=ev_a.append)
    c = RadixCache(700, page_size=page, on_event=ev_c.append)
    a.on_evict, c.on_evict = out_a.append, out_c.append
    bs = page * [1, 2, 4][seed % 3]
    live = []  # (request, locked tokens, node in a, node in c)
    seen = []  # requests made so far
    for step in range(300):
        a.now = c.now = float(step)
        if live and rng.random() < 0.5:  # a request moves its computed tokens into the tree
            req, prefix, na, nc = live.pop(rng.randrange(len(live)))
            total = req.input_length + req.output_length
            n = rng.randint(prefix, total)
            n -= n % page
            if n > prefix:
                assert a.alloc(n - prefix) and c.alloc(n - prefix)
                segs = sequence_segments(req, prefix, n)
                if rng.random() < 0.5:
                    pa, pc = a.insert_after(segs, na, prefix, n), c.insert_request_after(req, nc, prefix, n)
                    ma = mc = None
                else:
                    pa, ma = a.insert_after_and_match(segs, na, prefix, n)
                    pc, mc = c.insert_request_after_and_match(req, nc, prefix, n)
                    assert (ma.tokens, ma.node.uid) == (mc.tokens, mc.node.uid)
                assert pa == pc
                a.free(max(pa - prefix, 0))
                c.free(max(pc - prefix, 0))
                if ma is not None and rng.random() < 0.5:
                    a.inc_lock_ref(ma.node)
                    c.inc_lock_ref(mc.node)
                    a.dec_lock_ref(na)
                    c.dec_lock_ref(nc)
                    live.append((req, ma.tokens, ma.node, mc.node))
                    continue
            a.dec_lock_ref(na)
            c.dec_lock_ref(nc)
        else:  # a request matched one of three ways, then locked: a new one, or one seen before
            if seen and rng.random() < 0.3:  # (re-admitted after a retraction: meets its own runs)
                req = rng.choice(seen)
            else:
                ids = tuple(rng.randrange(3) if k < 2 else rng.randrange(12) for k in range(rng.randint(1, 6)))
                out = tuple(rng.randrange(12) for _ in range(rng.randint(0, 2)))
                req = Request(rng.randrange(4), "r", 0.0, rng.randint((len(ids) - 1) * bs + 1, len(ids) * bs),
                              rng.randint(1, 3 * bs), ids, bs, output_hash_ids=out)
                seen.append(req)
            stop = rng.randint(0, req.input_length)
            stop -= stop % page
            how = rng.randrange(3)
            ma = a.match_segments(sequence_segments(req, 0, stop))
            if how == 0:
                mc = c.match_request(req, stop)
            elif how == 1:
                mc = c.match_segments(sequence_segments(req, 0, stop))
            else:
                mc = c.match_prefix(sequence_units(req, stop))
            assert (ma.tokens, ma.node.uid) == (mc.tokens, mc.node.uid)
            a.inc_lock_ref(ma.node)
            c.inc_lock_ref(mc.node)
            live.append((req, ma.tokens, ma.node, mc.node))
        if rng.random() < 0.2:
            k = rng.randint(1, 60)
            assert a.evict(k) == c.evict(k)
        assert _nodes(a) == _nodes(c)
        assert (a.evictable_size, a.pool.free_tokens, a._seq) == (c.evictable_size, c.pool.free_tokens, c._seq)
        assert ev_a == ev_c and out_a == out_c
        c.check_invariants()
    assert any(node.req is not None for node in _all_nodes(c))
