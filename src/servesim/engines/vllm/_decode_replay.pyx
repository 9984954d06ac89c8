# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The vLLM model's decode block events, replayed in C on the compiled LRU pool's state.

A decode that computes a position at a block boundary opens a block (the free queue's head)
or, with prefix caching, fills one (registered under its chained hash).  The vLLM engine's
fast path (``fast_path.py``) replays these events for its leading plain decodes, one pass
(:func:`decode_pass`) or a stretch of identical passes (:func:`replay_decode`) at a time.
The events are the vLLM model's rules, not the pool's: the pool core
(``kvcache/_lru_core.pyx``) only accounts, and this module works on its state through
``kvcache/_lru_core.pxd`` (taking the head, registering a block) so that each event stays a
few C operations.

The Python reference is ``VLLMDecodeFastPath._replay_lru`` (and, for :func:`decode_pass`,
``blockkv/arithmetic.py:decode_due`` followed by that replay) on the Python pool; the engine
binds this module by ``servesim.compiled``'s rule and uses it on the compiled pool.
``tests/kvcache/test_compiled_pool.py`` and ``tests/engines/vllm/test_vllm_fast_paths.py``
check the two agree.
"""

from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset
from cpython cimport array
from cpython.object cimport Py_SIZE
from servesim.kvcache.block_owner cimport BlockOwner
from servesim.kvcache._lru_core cimport LRUCore, _append_id, _ids_of, _unit_size
from servesim._arrays cimport int64_data, is_int64_vector, new_int64
cimport numpy as cnp

cnp.import_array()


cdef inline int64_t _computed_at(object c0, const int64_t* c0p, Py_ssize_t j) except? -1:
    """Request ``j``'s computed tokens: from the int64 array's data ``c0p``, else the list ``c0``."""
    return c0p[j] if c0p != NULL else <int64_t>(<list>c0)[j]


cdef inline int _residue(int64_t x, int bs, int64_t mask) noexcept nogil:
    """``x mod bs`` in ``0..bs-1``; ``mask`` is ``bs - 1`` when ``bs`` is a power of two (no
    division: the stretch replay takes several per request), else -1."""
    if mask >= 0:
        return <int>(x & mask)
    return <int>((x % bs + bs) % bs)


cdef inline bint _occurs(int r, int first, int k, int bs, int64_t mask) noexcept nogil:
    """Whether a pass ``s`` with ``s ≡ r (mod bs)`` lies in ``first..k-1``."""
    return first + _residue(r - first, bs, mask) < k


cdef int _replay_open(LRUCore core, array.array blocks, list removed, on_evict) except -1:
    """A decode opens a block: the free list's head joins the block list ``blocks``; the
    hash it evicts goes to ``on_evict`` (``removed`` is its scratch list, None without a sink)."""
    if core.num_free <= 0:
        raise RuntimeError("vLLM model: decode stretch beyond the free blocks")
    _append_id(blocks, core._take_head(removed))
    if removed:
        for h in removed:
            on_evict((h,))
        del removed[:]
    return 0


cdef inline int32_t _block_at(LRUCore core, array.array ids, int64_t i) except -1:
    """Block ``i`` of the block list ``ids``, checked."""
    if i < 0 or i >= Py_SIZE(ids):
        raise IndexError(f"block {i} of a request holding {Py_SIZE(ids)}")
    return core._id(ids.data.as_ints[i])


cdef int _replay_pass(LRUCore core, list reqs, object c0, const int64_t* c0p, int s, int bs, bint caching, extend,
                      on_evict) except -1:
    """:func:`replay_decode` of the single pass ``s``: its events in request order, each
    request's open before its fill, with no bucketing (the buckets would give this order)."""
    cdef Py_ssize_t j
    cdef int64_t c, us, i
    cdef BlockOwner vr
    cdef object chain
    cdef list removed = [] if on_evict is not None else None
    for j in range(len(reqs)):
        c = _computed_at(c0, c0p, j) + s  # the position this pass computes
        if c % bs == 0:  # opens a block
            _replay_open(core, _ids_of(<BlockOwner?>reqs[j]), removed, on_evict)
        if caching and (c + 1) % bs == 0:  # fills block i
            vr = <BlockOwner?>reqs[j]
            i = (c + 1) // bs - 1
            if i >= vr.private_from:  # no other request can look it up: not registered
                vr.n_cached = i + 1
                continue
            chain = vr.chain
            us = _unit_size(vr)
            if ((i + 1) * <int64_t>bs - 1) // us >= len(chain):  # the chain must reach its unit
                chain = extend(vr, <int>(i + 1))
                core._check_chain(chain, us, bs, i + 1)
            core._cache_chain_one(_block_at(core, _ids_of(vr), i), chain, us, bs, <Py_ssize_t>i)
            vr.n_cached = i + 1
    return 0


def decode_pass(LRUCore core not None, list reqs, object computed, int bs, bint caching, extend, on_evict):
    """A decode pass of the vLLM model's leading plain decodes, if its blocks fit.

    Request ``j`` computes position ``computed[j]`` (an int64 array): it opens a block when
    that position starts one and, with prefix caching, fills one when it ends one.  Unless
    the free pool holds both the blocks these requests open and as many as there are
    requests with an event (``engines/blockkv/arithmetic.py:decode_due``'s test: then nothing is done
    and None returned), replays the pass's events as :func:`replay_decode` of pass 0
    does and returns the contexts, ``computed + 1``: the engine's check, the requests at
    a block boundary and their replay, in one call.
    """
    if not is_int64_vector(computed):
        raise TypeError(f"computed tokens: expected a 1-d int64 array, got {type(computed).__name__}")
    cdef Py_ssize_t j, n = len(reqs)
    if len(computed) != n:
        raise ValueError(f"computed tokens of {len(computed)} requests for {n}")
    cdef const int64_t* c = int64_data(computed)
    cdef int64_t r, one = 1 % bs
    cdef Py_ssize_t due = 0, opens = 0
    for j in range(n):
        r = (c[j] + 1) % bs
        if r == one:
            opens += 1
        if (r <= 1) if caching else (r == one):
            due += 1
    if due > core.num_free and opens > core.num_free:
        return None
    ctx = new_int64(n)
    cdef int64_t* cx = int64_data(ctx)
    for j in range(n):
        cx[j] = c[j] + 1
    if due:
        _replay_pass(core, reqs, computed, c, 0, bs, caching, extend, on_evict)
    return ctx


def replay_decode(LRUCore core not None, list reqs, object c0, int first, int k, int bs, bint caching,
                  extend, on_evict) -> None:
    """The block events of decode passes ``first..k-1`` of the vLLM model, in order.

    Request ``j`` (``reqs[j]``, a :class:`~servesim.kvcache.block_owner.BlockOwner`: the
    vLLM model's ``VReq``, whose fields are read here as struct fields) computes position
    ``c0[j] + s`` in pass ``s`` (``c0``: a list, or an int64 array read in place): it
    takes a block from the free queue's head when that position opens one, and registers
    its block ``i`` when the position fills it (with prefix caching), under the hash its
    unit chain ``vr.chain`` gives (units of ``vr.req.block_size`` tokens).  Events of one
    pass go in request order, an open before a fill.  ``extend(vr, n)`` returns the
    request's unit chain extended to cover ``n`` blocks; ``on_evict`` (or None) receives
    each evicted hash as a 1-tuple.  Same effects as ``fast_path.py:VLLMDecodeFastPath._replay_lru`` on the Python pool.
    """
    cdef int n = len(reqs)
    cdef const int64_t* c0p = NULL
    if is_int64_vector(c0):
        c0p = int64_data(c0)
    elif type(c0) is not list:
        raise TypeError(f"computed tokens: expected a list or a 1-d int64 array, got {type(c0).__name__}")
    if len(c0) != n:
        raise ValueError(f"computed tokens of {len(c0)} requests for {n}")
    if n == 0 or k <= first:
        return
    if k == first + 1:  # one pass (most calls: the requests at a block boundary as a pass is scheduled)
        _replay_pass(core, reqs, c0, c0p, first, bs, caching, extend, on_evict)
        return
    cdef int64_t* cs = <int64_t*>malloc(n * sizeof(int64_t))
    cdef int32_t* last_fill = <int32_t*>malloc(n * sizeof(int32_t))
    cdef int32_t* opens = <int32_t*>malloc(n * sizeof(int32_t))  # residue of the opening passes, or -1
    cdef int32_t* fills = <int32_t*>malloc(n * sizeof(int32_t))  # residue of the filling passes, or -1
    cdef int32_t* start = <int32_t*>malloc((bs + 1) * sizeof(int32_t))
    cdef int32_t* pos = <int32_t*>malloc(bs * sizeof(int32_t))
    cdef int32_t* ev = <int32_t*>malloc(2 * n * sizeof(int32_t))  # j * 2 + kind, by residue
    if not cs or not last_fill or not opens or not fills or not start or not pos or not ev:
        free(cs); free(last_fill); free(opens); free(fills); free(start); free(pos); free(ev)
        raise MemoryError()
    cdef int j, r, a, s, e, i
    cdef int64_t us
    cdef int64_t mask = bs - 1 if (bs & (bs - 1)) == 0 else -1  # residues by a mask when bs is a power of 2
    cdef BlockOwner vr
    cdef object chain
    cdef list removed = [] if on_evict is not None else None
    try:
        # Each request's events: pass s opens a block when s ≡ a = -c (mod bs) and, with
        # prefix caching, fills one when s ≡ a - 1; kept only if such a pass lies in
        # first..k-1.  Bucketed by residue (counting sort, request order kept).
        memset(start, 0, (bs + 1) * sizeof(int32_t))
        for j in range(n):
            cs[j] = _computed_at(c0, c0p, j)
            last_fill[j] = -1
            a = _residue(-cs[j], bs, mask)
            opens[j] = a if _occurs(a, first, k, bs, mask) else -1
            r = _residue(a - 1, bs, mask)
            fills[j] = r if caching and _occurs(r, first, k, bs, mask) else -1
            if fills[j] >= 0 and (cs[j] + first + _residue(r - first, bs, mask) + 1) // bs - 1 >= (
                    <BlockOwner?>reqs[j]).private_from:
                # Its first fill here (hence every one) is of a private block: no map work,
                # only its count of blocks passed over moves on, to its last fill here.
                last_fill[j] = <int>((cs[j] + k) // bs - 1)
                fills[j] = -1
            if opens[j] >= 0:
                start[opens[j] + 1] += 1
            if fills[j] >= 0:
                start[fills[j] + 1] += 1
        for r in range(bs):
            start[r + 1] += start[r]
            pos[r] = start[r]
        for j in range(n):
            if opens[j] >= 0:
                ev[pos[opens[j]]] = 2 * j
                pos[opens[j]] += 1
            if fills[j] >= 0:
                ev[pos[fills[j]]] = 2 * j + 1
                pos[fills[j]] += 1
            if opens[j] >= 0 or fills[j] >= 0:  # only requests with events are read: checked here
                vr = <BlockOwner?>reqs[j]
                _ids_of(vr)
                _unit_size(vr)
        # The events read each request's fields from its struct (checked above; nothing
        # but ``extend``, which only lengthens the chain, runs in between).
        for s in range(first, k):
            r = _residue(s, bs, mask)
            for e in range(start[r], start[r + 1]):
                j = ev[e] >> 1
                vr = <BlockOwner>reqs[j]
                if (ev[e] & 1) == 0:  # opens a block
                    _replay_open(core, vr.blocks, removed, on_evict)
                    continue
                i = <int>((cs[j] + s + 1) // bs - 1)  # fills block i
                last_fill[j] = i
                if i >= vr.private_from:  # no other request can look it up: not registered
                    continue
                chain = vr.chain
                us = vr.req.block_size
                if ((i + 1) * <int64_t>bs - 1) // us >= len(chain):  # the chain must reach its unit
                    chain = extend(vr, <int>((cs[j] + k) // bs))
                    vr.chain = chain
                    core._check_chain(chain, us, bs, i + 1)
                core._cache_chain_one(_block_at(core, vr.blocks, i), chain, us, bs, i)
        for j in range(n):
            if last_fill[j] >= 0:
                (<BlockOwner>reqs[j]).n_cached = last_fill[j] + 1
    finally:
        free(cs)
        free(last_fill)
        free(opens)
        free(fills)
        free(start)
        free(pos)
        free(ev)

