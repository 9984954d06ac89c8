# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled state of an LRU block pool: reference counts, cached hashes, free list, hash map.

(Longer than 600 lines because it is one ``cdef class``, the C twin of ``block_pool.py``'s
pool, method by method: its hash map, free-queue ring and chain cursors work on the same
per-block structs, and a split would turn their per-block calls into calls across modules.)

The pure-Python :class:`servesim.kvcache.block_pool.BlockPool` spends most of its time in
the per-block work of a Python ``dict`` (one delete and one insert per recycled block) and
one interpreted iteration per block.  This core keeps the same state in C arrays:

* one 16-byte ``Blk`` struct per block ``b``, so that a block's state shares a cache line
  (four blocks to a line: a run of allocations or frees reads neighbouring ids): ``refs``
  (requests holding it), ``hval`` (the hash it is cached under: ``NO_HASH`` if none,
  ``BIG_HASH`` if one kept outside the C map) and ``qpos``, its place in the free queue (the
  ring position modulo 2**31);
* the free queue (vLLM's ``FreeKVCacheBlockQueue``: freed blocks join the tail, allocations
  pop the head, a prefix hit takes a block out of the middle) as a ring of block ids with
  lazy deletion, like the Python pool's deque: an entry at position ``p`` is live when its
  block's ``qpos`` is ``p`` (modulo 2**31), and a block leaves the middle by dropping its ``qpos``; a block
  is on the queue exactly when its reference count is 0.  A linked list would make every
  allocation a chain of dependent cache misses (the next block is known only once this one
  is loaded); the ring is read in order, so allocation loads blocks several places ahead;
* an open-addressing hash map from hash to block (linear probing, deletion by backward
  shift, load at most one quarter), holding one block per hash as the Python pool does.  A
  slot holds only the block and 32 bits of the key's mixed hash (its home slot and a
  fingerprint); the key itself is the block's ``hval``, read only when the fingerprint
  matches.  At 8 bytes a slot the map of a 50k-block pool fits in 2 MB: the pool's
  work is mostly cache misses, and halving the slot cut a block's cost by about a third
  (``benchmarks/bench_block_pool.py --pools 4``); a quarter full rather than half, probe
  runs stay within a cache line more often.

Hashes are Python ints.  Those within a signed 64-bit integer (all but ~1 in 10^16: a
chained hash plus an offset can pass 2^63) go to the C map; any other goes to a small
Python dict beside it, so every hash stays exact.

The ``chain_*`` methods take a request's unit chain instead of its list of block hashes and
compute block ``i``'s hash in C (``servesim.kvcache.hashing.chain_block_hashes``: the chain
value of the unit holding the block's last token plus the block's end offset in that unit),
so a prompt's ~200 hashes are never built as Python ints; a cursor walks a prompt's blocks
(one division to place it, then additions, each unit's chain value converted once).

A request's blocks are a *block list* (``servesim.kvcache.block_pool.block_list``): an
``array.array`` of C ints, which the ``*_to`` / ``chain_*`` / ``free_tail_first`` methods (and
the vLLM model's decode replay, ``engines/vllm/_decode_replay.pyx``, which works on this
core's state through ``_lru_core.pxd``) read and extend in place.  A Python list of ints would cost one int object per block,
allocated when the block is taken and freed with the list (about a sixth of a vLLM run's
instructions) and touched, a cache miss, each time the block id is read.

The work left is mostly cache misses (a pool's blocks and map overflow the L2 cache of a
four-worker run): the loops over many blocks (``allocate``, ``free_tail_first``,
``chain_cache``) prefetch the next blocks and map slots so that their misses overlap.

:class:`servesim.kvcache.lru_pool.CompiledLRUPool` wraps this core with the Python pool's
interface; ``tests/kvcache/test_compiled_pool.py`` checks the two agree after every
operation of random sequences.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython cimport array
from cpython.object cimport Py_SIZE
from servesim.kvcache.block_owner cimport BlockOwner

import array as _array_module

#: An empty block list, the template that ``array.clone`` copies the type and item size of.
cdef array.array _EMPTY_IDS = _array_module.array("i")

#: The structs Blk, Slot and Cursor, the block-list helpers and the class's fields and C methods
#: are declared in _lru_core.pxd.


cdef inline uint64_t _mix(uint64_t x) noexcept nogil:
    """splitmix64's finaliser: spreads nearby hashes (a unit's blocks differ by 16) over the table."""
    x ^= x >> 30
    x *= <uint64_t>0xbf58476d1ce4e5b9
    x ^= x >> 27
    x *= <uint64_t>0x94d049bb133111eb
    x ^= x >> 31
    return x


cdef extern from "<stdint.h>":
    const int64_t INT64_MAX

# ``Blk.hval`` of a block cached under no hash, and of one cached under a hash kept in the
# Python dicts (``big``): the two lowest int64 values, so a key of the C map is above both
# (the two values themselves, as keys, go to the dicts too).
cdef extern from *:
    """
    #define SERVESIM_NO_HASH INT64_MIN
    #define SERVESIM_BIG_HASH (INT64_MIN + 1)
    """
    const int64_t NO_HASH "SERVESIM_NO_HASH"
    const int64_t BIG_HASH "SERVESIM_BIG_HASH"

# ``Blk.qpos`` keeps a ring position modulo 2**31: the live range of the ring is shorter
# (pools of at most 2**29 blocks), so within it the residue names one position.
cdef enum:
    QMASK = 0x7fffffff
    MAX_BLOCKS = 1 << 29

cdef extern from *:
    # GCC / Clang: start loading a cache line now, so that misses overlap instead of queueing.
    void __builtin_prefetch(const void* addr) nogil


# How far ahead an allocation loads the queue's blocks, and the map slots of their hashes
# (a sixteen-worker agentic run, benchmarks/bench_agentic.py, ran ~3% faster with these
# than with 8 and 4, and no faster with 28 and 14; ``chain_cache`` and ``free_tail_first``
# look 12 blocks ahead likewise).
cdef enum:
    LEAD_BLOCK = 16
    LEAD_SLOT = 8


cdef class LRUCore:
    """Block pool state under LRU; see the module docstring.  Methods mirror ``BlockPool``'s."""

    def __cinit__(self, int num_blocks):
        if num_blocks < 0:
            raise ValueError(f"need num_blocks >= 0, got {num_blocks}")
        if num_blocks > MAX_BLOCKS:
            raise ValueError(f"the compiled pool holds at most {MAX_BLOCKS} blocks, got {num_blocks}")
        cdef int n = num_blocks
        cdef int m = n if n > 0 else 1
        # The map at most a quarter full and the ring four times the blocks: a sixteen-worker
        # agentic run (benchmarks/bench_agentic.py) took ~6% less CPU than at half full and
        # twice (a deletion shifts the rest of its probe run back, and at half full that run
        # often reaches into the next cache line; the ring compacts half as often).
        cdef uint64_t cap = 8, rcap = 8
        while cap < 4 * <uint64_t>m:
            cap <<= 1
        rcap = cap
        self.num_blocks = n
        self.blk = <Blk*>malloc(m * sizeof(Blk))
        self.table = <Slot*>malloc(cap * sizeof(Slot))
        self.ring = <int32_t*>malloc(rcap * sizeof(int32_t))
        self.ucap = 4 * m if m > 256 else 1024
        self.ulog = <int32_t*>malloc(self.ucap * sizeof(int32_t))
        self.ulen = 0
        self.ubase = 0
        self.mtag = <int64_t*>malloc(m * sizeof(int64_t))
        self.mpos = <int32_t*>malloc(m * sizeof(int32_t))
        self.wserial = 0
        if not self.blk or not self.table or not self.ring or not self.ulog or not self.mtag or not self.mpos:
            raise MemoryError()
        self.tmask = cap - 1
        self.rmask = rcap - 1
        cdef int b
        cdef uint64_t slot
        for slot in range(cap):
            self.table[slot].block = -1
        for b in range(n):  # every block free, in id order
            self.blk[b].refs = 0
            self.blk[b].hval = NO_HASH
            self.blk[b].qpos = b
            self.mtag[b] = 0
            self.ring[b] = b
        self.rhead = 0
        self.rtail = n
        self.num_free = n
        self.num_cached = 0
        self.big = {}
        self.big_of = {}

    def __dealloc__(self):
        free(self.blk)
        free(self.table)
        free(self.ring)
        free(self.ulog)
        free(self.mtag)
        free(self.mpos)

    # ------------------------------------------------------------------ hashes as Python ints
    cdef inline int32_t _find_obj(self, object h) except -2:
        """The block cached under hash ``h``, or -1."""
        cdef int overflow = 0
        cdef int64_t k = PyLong_AsLongLongAndOverflow(h, &overflow)
        if overflow == 0 and k > BIG_HASH:
            return self._find(k)
        b = self.big.get(h)
        return -1 if b is None else b

    cdef inline int _insert_obj(self, object h, int32_t b) except -1:
        """Cache block ``b`` under hash ``h`` (absent from the map)."""
        cdef int overflow = 0
        cdef int64_t k = PyLong_AsLongLongAndOverflow(h, &overflow)
        if overflow == 0 and k > BIG_HASH:
            self.blk[b].hval = k
            self._put(k, b)
        else:
            self.big[h] = b
            self.big_of[b] = h
            self.blk[b].hval = BIG_HASH
            self.num_cached += 1
        return 0

    cdef inline int _uncache(self, int32_t b, list removed) except -1:
        """Drop block ``b``'s hash from the map (appended to ``removed`` unless None)."""
        if self.blk[b].hval != BIG_HASH:
            if removed is not None:
                removed.append(self.blk[b].hval)
            self._delete(self.blk[b].hval)
        else:
            h = self.big_of.pop(b)
            del self.big[h]
            self.num_cached -= 1
            if removed is not None:
                removed.append(h)
        self.blk[b].hval = NO_HASH
        if self.ulen == self.ucap:
            self.ubase += self.ulen
            self.ulen = 0
        self.ulog[self.ulen] = b
        self.ulen += 1
        return 0

    cdef inline object _hash_of(self, int32_t b):
        """The hash block ``b`` is cached under, or None."""
        if self.blk[b].hval == NO_HASH:
            return None
        if self.blk[b].hval == BIG_HASH:
            return self.big_of[b]
        return self.blk[b].hval

    # ------------------------------------------------------------------ hash map
    cdef inline void _prefetch_slot(self, int64_t k) noexcept:
        """Start loading the home slot of key ``k``."""
        __builtin_prefetch(&self.table[<uint32_t>_mix(<uint64_t>k) & self.tmask])

    cdef inline uint64_t _probe(self, int64_t k, uint32_t h) noexcept:
        """The slot of key ``k`` (mixed hash ``h``): the one holding it, else the empty slot that
        ends its probe run, where it would be stored."""
        cdef uint64_t i = h & self.tmask
        cdef int32_t b
        while True:
            b = self.table[i].block
            if b < 0 or (self.table[i].h == h and self.blk[b].hval == k):
                return i
            i = (i + 1) & self.tmask

    cdef inline void _store(self, uint64_t i, uint32_t h, int32_t b) noexcept:
        """Put block ``b`` (its hval already its key, of mixed hash ``h``) in empty slot ``i``."""
        self.table[i].h = h
        self.table[i].block = b
        self.num_cached += 1

    cdef inline int32_t _find(self, int64_t k) noexcept:
        """The block cached under ``k``, or -1."""
        return self.table[self._probe(k, <uint32_t>_mix(<uint64_t>k))].block

    cdef inline void _put(self, int64_t k, int32_t b) noexcept:
        """Insert ``k`` (absent) -> ``b``; ``b``'s hval is already ``k``."""
        cdef uint32_t h = <uint32_t>_mix(<uint64_t>k)
        self._store(self._probe(k, h), h, b)

    cdef void _delete(self, int64_t k) noexcept:
        """Remove ``k`` (present), shifting later entries of its probe run back."""
        cdef uint64_t mask = self.tmask
        cdef uint32_t h = <uint32_t>_mix(<uint64_t>k)
        cdef uint64_t i = h & mask
        cdef uint64_t j, home
        while self.table[i].block < 0 or self.table[i].h != h or self.blk[self.table[i].block].hval != k:
            i = (i + 1) & mask
        j = i
        while True:
            j = (j + 1) & mask
            if self.table[j].block < 0:
                break
            home = self.table[j].h & mask
            # The entry at j may move to the hole at i unless its home lies cyclically in (i, j].
            if ((j - home) & mask) >= ((j - i) & mask):
                self.table[i] = self.table[j]
                i = j
        self.table[i].block = -1
        self.num_cached -= 1

    # ------------------------------------------------------------------ free queue (ring)
    cdef inline bint _live(self, int64_t p) noexcept:
        """Whether the ring entry at position ``p`` is its block's place in the queue."""
        return self.blk[self.ring[p & self.rmask]].qpos == <int32_t>(p & QMASK)

    cdef inline void _unlink(self, int32_t b) noexcept:
        """Take free block ``b`` out of the queue (its ring entry goes stale)."""
        self.blk[b].qpos = -1
        self.num_free -= 1

    cdef inline void _push_tail(self, int32_t b) noexcept:
        if <uint64_t>(self.rtail - self.rhead) > self.rmask:
            self._compact()
        self.ring[self.rtail & self.rmask] = b
        self.blk[b].qpos = <int32_t>(self.rtail & QMASK)
        self.rtail += 1
        self.num_free += 1

    cdef void _compact(self) noexcept:
        """Drop the ring's stale entries, keeping the live ones in order (the ring holds at
        least twice the blocks, so this runs at most once per that many frees)."""
        cdef int64_t p, w = self.rhead
        cdef int32_t b
        for p in range(self.rhead, self.rtail):
            b = self.ring[p & self.rmask]
            if self.blk[b].qpos == <int32_t>(p & QMASK):
                self.ring[w & self.rmask] = b
                self.blk[b].qpos = <int32_t>(w & QMASK)
                w += 1
        self.rtail = w

    cdef inline int64_t _head_pos(self) noexcept:
        """The position of the queue's first live entry (stale ones before it are dropped);
        the queue must not be empty."""
        while not self._live(self.rhead):
            self.rhead += 1
        return self.rhead

    cdef inline int32_t _take_head(self, list removed) except -2:
        """Pop the head block, evict its hash (appended to ``removed`` unless None), ref it."""
        cdef int64_t p = self._head_pos()
        cdef int32_t b = self.ring[p & self.rmask], nb
        # The pool's work is cache misses: the queue's next blocks and the map slots of the
        # hashes they evict.  The ring lists the blocks to come (a stale entry among them
        # costs a wasted load, no more), so their states are loaded LEAD_BLOCK entries ahead
        # and, once loaded, their slots LEAD_SLOT ahead: a run of allocations (a prompt's, or
        # a decode pass's opens) overlaps its misses.
        if p + LEAD_BLOCK < self.rtail:
            __builtin_prefetch(&self.blk[self.ring[(p + LEAD_BLOCK) & self.rmask]])
        if p + LEAD_SLOT < self.rtail:
            nb = self.ring[(p + LEAD_SLOT) & self.rmask]
            if self.blk[nb].hval > BIG_HASH:
                self._prefetch_slot(self.blk[nb].hval)
        self.rhead = p + 1
        self._unlink(b)
        if self.blk[b].hval != NO_HASH:
            self._uncache(b, removed)
        self.blk[b].refs = 1
        return b

    cdef inline int32_t _block(self, object ob) except -1:
        """Block id ``ob`` as a C int, checked to lie in the pool."""
        return self._id(ob)

    cdef inline int32_t _id(self, long long b) except -1:
        """Block id ``b`` (as read from a block list), checked to lie in the pool."""
        if b < 0 or b >= self.num_blocks:
            raise IndexError(f"block {b} outside the pool of {self.num_blocks}")
        return <int32_t>b

    # ------------------------------------------------------------------ hashes from a unit chain
    cdef int _check_chain(self, object chain, int64_t us, int64_t bs, Py_ssize_t stop) except -1:
        """Raise unless ``chain`` reaches the unit of block ``stop - 1``."""
        if us <= 0 or bs <= 0:
            raise ValueError(f"need unit and block sizes >= 1, got {us}, {bs}")
        if stop > 0 and (stop * bs - 1) // us >= len(chain):
            raise ValueError(f"a unit chain of {len(chain)} units does not reach block {stop - 1}")
        return 0

    # A prompt's blocks are walked in order, so their hashes come from a cursor: one
    # division to place it, then an addition per block, and chain[j] read once per unit
    # instead of once per block (in place from a chain list, ``kvcache/hashing.py:chain_list``;
    # converted from a Python int from any other sequence).
    cdef inline int _cursor_load(self, Cursor* c, object chain) except -1:
        cdef int overflow = 0
        if c.data != NULL:  # a chain list: its values are int64
            c.p = c.data[c.j]
            c.fits = True
            return 0
        c.p = PyLong_AsLongLongAndOverflow(chain[c.j], &overflow)
        c.fits = overflow == 0
        return 0

    cdef inline int _cursor_at(self, Cursor* c, object chain, int64_t us, int64_t bs, Py_ssize_t i) except -1:
        """Place ``c`` on block ``i`` (``chain`` must reach its unit).

        The block ends at token ``t = (i + 1) * bs``, in unit ``j = (t - 1) // us``; its hash is
        ``chain[j] + (t - j * us)``.
        """
        cdef int64_t t = (i + 1) * bs
        c.us = us
        c.bs = bs
        c.data = _chain_data(chain)
        c.j = <Py_ssize_t>((t - 1) // us)
        c.d = t - c.j * us
        return self._cursor_load(c, chain)

    cdef inline int _cursor_next(self, Cursor* c, object chain, bint load) except -1:
        """Move ``c`` to the next block; its unit's value is read only if ``load``."""
        cdef Py_ssize_t j0 = c.j
        c.d += c.bs
        while c.d > c.us:
            c.d -= c.us
            c.j += 1
        if load and c.j != j0:
            self._cursor_load(c, chain)
        return 0

    # The hash of the block under a cursor almost always fits in int64 (above BIG_HASH): that case stays in C
    # (no Python object passes, not even None), the other goes through a Python int.
    cdef inline bint _cursor_fits(self, Cursor* c, int64_t* k) noexcept:
        """Whether the hash of the block under ``c`` fits in int64; if so it is written to ``k``."""
        if c.fits and c.p <= INT64_MAX - c.d and c.p + c.d > BIG_HASH:
            k[0] = c.p + c.d
            return True
        return False

    cdef inline object _cursor_big(self, Cursor* c, object chain):
        """The hash of the block under ``c`` as a Python int (for one that does not fit)."""
        return chain[c.j] + c.d

    cdef inline int32_t _cursor_find(self, Cursor* c, object chain) except -2:
        """The block cached under the hash of the block under ``c``, or -1."""
        cdef int64_t k = 0
        if self._cursor_fits(c, &k):
            return self._find(k)
        return self._find_obj(self._cursor_big(c, chain))

    def chain_prefix(self, object chain, int64_t us, int64_t bs, Py_ssize_t n) -> int:
        """:meth:`find_cached_prefix` of blocks ``0..n-1``'s hashes."""
        self._check_chain(chain, us, bs, n)
        if n <= 0:
            return 0
        cdef Cursor c
        cdef Py_ssize_t i
        self._cursor_at(&c, chain, us, bs, 0)
        for i in range(n):
            if self._cursor_find(&c, chain) < 0:
                return i
            self._cursor_next(&c, chain, i + 1 < n)
        return n

    # A request that waits is looked up again at every pass until it is admitted.  Its last
    # lookup is remembered on it (``BlockOwner.memo``: the blocks of its cached prefix) with
    # the uncache log's position, so a new lookup costs the evictions since (a remembered
    # block evicted cuts the prefix there) plus the blocks walked past the remembered end,
    # not the prefix's length.
    def owner_prefix(self, BlockOwner o, int64_t us, int64_t bs, Py_ssize_t n) -> int:
        """:meth:`chain_prefix` of ``o.chain`` for blocks ``0..n-1``, from ``o``'s remembered lookup."""
        self._check_chain(o.chain, us, bs, n)
        if n <= 0:
            return 0
        return self._owner_sync(o, us, bs, n)

    cdef Py_ssize_t _owner_sync(self, BlockOwner o, int64_t us, int64_t bs, Py_ssize_t n) except -1:
        """Bring ``o.memo`` up to date and extend it up to ``n`` blocks; the cached prefix."""
        cdef array.array memo = o.memo
        cdef int* ids = memo.data.as_ints
        cdef Py_ssize_t h = Py_SIZE(memo), k
        cdef int64_t now = self.ubase + self.ulen, delta, tag
        cdef int32_t b
        if o.memo_of is not self or o.memo_at < self.ubase or o.memo_at > now:
            h = 0
            o.memo_tag = -1
        else:
            delta = now - o.memo_at
            if delta > 0 and h > 0:
                if delta >= h:  # walking the prefix again costs less than reading the log
                    h = 0
                else:
                    if o.memo_tag != self.wserial or o.memo_tag <= 0:  # mark o's blocks
                        self.wserial += 1
                        o.memo_tag = self.wserial
                        for k in range(h):
                            self.mtag[ids[k]] = self.wserial
                            self.mpos[ids[k]] = <int32_t>k
                    tag = o.memo_tag
                    for k in range(<Py_ssize_t>(o.memo_at - self.ubase), self.ulen):
                        b = self.ulog[k]
                        if self.mtag[b] == tag and self.mpos[b] < h:
                            h = self.mpos[b]
        if h < Py_SIZE(memo):
            array.resize(memo, h)
        o.memo_of = self
        o.memo_at = now
        if h < n:
            tag = o.memo_tag if o.memo_tag == self.wserial else 0
            h = self._walk_memo(o, memo, us, bs, h, n, tag)
        return h if h < n else n

    cdef Py_ssize_t _walk_memo(self, BlockOwner o, array.array memo, int64_t us, int64_t bs, Py_ssize_t h,
                               Py_ssize_t n, int64_t tag) except -1:
        """Extend ``memo`` (``h`` blocks) with the cached blocks of ``o.chain``'s blocks ``h..n-1``
        up to the first miss; the new length.

        Each lookup is a cache miss or two (the map slot, then the block's state): the slots of
        the hashes LEAD_SLOT blocks ahead are loaded early, as in :meth:`chain_cache`, so that a
        long hit's misses overlap (a new request's first lookup walks its whole hit).
        """
        cdef Cursor c, ahead
        cdef int64_t ka = 0
        cdef int32_t b
        cdef bint lead = h + LEAD_SLOT < n
        self._cursor_at(&c, o.chain, us, bs, h)
        if lead:
            self._cursor_at(&ahead, o.chain, us, bs, h + LEAD_SLOT)
        while h < n:
            if lead:
                if self._cursor_fits(&ahead, &ka):
                    self._prefetch_slot(ka)
                lead = h + LEAD_SLOT + 1 < n
                self._cursor_next(&ahead, o.chain, lead)
            b = self._cursor_find(&c, o.chain)
            if b < 0:
                break
            _append_id(memo, b)
            if tag > 0:
                self.mtag[b] = tag
                self.mpos[b] = <int32_t>h
            h += 1
            self._cursor_next(&c, o.chain, h < n)
        return h

    def owner_take_within(self, BlockOwner o, int64_t us, int64_t bs, Py_ssize_t n, Py_ssize_t need):
        """:meth:`chain_take_within` of ``o.chain`` (blocks ``0..n-1``, all cached), through
        ``o``'s remembered lookup; forgotten once the blocks are taken."""
        cdef array.array out
        if need > self.num_free:  # hits on free blocks only add to what is needed
            return None
        self._check_chain(o.chain, us, bs, n)
        if n > 0 and self._owner_sync(o, us, bs, n) < n:
            raise KeyError(n)
        # Even with every hit on a free block the fresh blocks fit: nothing to count.  Else
        # the count stops at the first free hit too many (a failed admission is retried at
        # every pass, and its head's hit can be thousands of blocks).
        if need + n > self.num_free and self._free_hits_over(o.memo.data.as_ints, n, self.num_free - need):
            return None
        out = array.clone(_EMPTY_IDS, n if n > 0 else 0, False)
        if n > 0:
            memcpy(out.data.as_ints, o.memo.data.as_ints, n * sizeof(int))
        self._reference_ids(out)
        array.resize(o.memo, 0)  # forgotten (BlockOwner.forget_prefix), keeping the array
        o.memo_at = -1
        o.memo_of = None
        return out

    def prefix_cuts(self, BlockOwner o, Py_ssize_t hit, Py_ssize_t k):
        """How the next ``k`` allocations (the free queue's first ``k`` blocks) cut ``o``'s cached
        prefix of ``hit`` blocks: ``(free, cuts)``, ``free`` the prefix's blocks that are free
        and ``cuts`` a list of ``(i, q, free_q)``: the ``i``-th allocation takes prefix block
        ``q``, below every earlier cut, which leaves a prefix of ``q`` blocks, ``free_q`` of them
        free.  None unless ``o``'s lookup is the one just remembered (:meth:`owner_prefix`)."""
        cdef array.array memo = o.memo
        cdef int* ids = memo.data.as_ints
        cdef Py_ssize_t i, seen = 0, cur = hit
        cdef int64_t p
        cdef int32_t b
        cdef int64_t* pf
        cdef list cuts = []
        if hit < 0 or o.memo_of is not self or o.memo_at != self.ubase + self.ulen or Py_SIZE(memo) < hit:
            return None
        pf = <int64_t*>malloc((hit + 1) * sizeof(int64_t))
        if not pf:
            raise MemoryError()
        self.wserial += 1
        o.memo_tag = self.wserial
        pf[0] = 0
        for i in range(Py_SIZE(memo)):
            self.mtag[ids[i]] = self.wserial
            self.mpos[ids[i]] = <int32_t>i
            if i < hit:
                pf[i + 1] = pf[i] + (1 if self.blk[ids[i]].refs == 0 else 0)
        p = self.rhead
        while seen < k and p < self.rtail and cur > 0:
            if self._live(p):
                b = self.ring[p & self.rmask]
                if self.mtag[b] == o.memo_tag and self.mpos[b] < cur:
                    cur = self.mpos[b]
                    cuts.append((seen, cur, pf[cur]))
                seen += 1
            p += 1
        free0 = pf[hit]
        free(pf)
        return free0, cuts

    cdef array.array _chain_blocks(self, object chain, int64_t us, int64_t bs, Py_ssize_t n):
        """The blocks cached under blocks ``0..n-1``'s hashes, as a block list; KeyError if one
        is not cached."""
        self._check_chain(chain, us, bs, n)
        cdef array.array out = array.clone(_EMPTY_IDS, n if n > 0 else 0, False)
        if n <= 0:
            return out
        cdef Cursor c
        cdef Py_ssize_t i
        cdef int32_t b
        self._cursor_at(&c, chain, us, bs, 0)
        for i in range(n):
            b = self._cursor_find(&c, chain)
            if b < 0:
                raise KeyError(i)
            out.data.as_ints[i] = b
            self._cursor_next(&c, chain, i + 1 < n)
        return out

    def chain_count_free(self, object chain, int64_t us, int64_t bs, Py_ssize_t n) -> int:
        """:meth:`count_free` of blocks ``0..n-1``'s hashes."""
        return self._free_hits(self._chain_blocks(chain, us, bs, n))

    def chain_take(self, object chain, int64_t us, int64_t bs, Py_ssize_t n) -> array.array:
        """:meth:`take_cached` of blocks ``0..n-1``'s hashes, as a new block list."""
        cdef array.array out = self._chain_blocks(chain, us, bs, n)
        self._reference_ids(out)
        return out

    def chain_take_within(self, object chain, int64_t us, int64_t bs, Py_ssize_t n, Py_ssize_t need):
        """:meth:`chain_take` of blocks ``0..n-1`` if ``need`` fresh blocks then still fit in the
        free queue (a hit on a free block uses one up), else None, taking nothing: one walk
        for :meth:`chain_count_free` and :meth:`chain_take`."""
        cdef array.array out = self._chain_blocks(chain, us, bs, n)
        if need + self._free_hits(out) > self.num_free:
            return None
        self._reference_ids(out)
        return out

    cdef Py_ssize_t _free_hits(self, array.array ids) noexcept:
        """How many blocks of the block list ``ids`` (ids from the map) are free."""
        cdef Py_ssize_t i, hits = 0
        for i in range(Py_SIZE(ids)):
            if self.blk[ids.data.as_ints[i]].refs == 0:
                hits += 1
        return hits

    cdef bint _free_hits_over(self, const int* ids, Py_ssize_t n, Py_ssize_t room) noexcept:
        """Whether more than ``room`` of the blocks ``ids[0..n-1]`` (ids from the map) are free;
        stops counting there.  From the last: a prefix's leading blocks (a system prompt) are
        the ones other running requests hold, its free blocks lie towards its end."""
        cdef Py_ssize_t i, hits = 0
        for i in range(n - 1, -1, -1):
            if i >= LEAD_BLOCK:  # each block's state is a cache miss: load a few ahead
                __builtin_prefetch(&self.blk[ids[i - LEAD_BLOCK]])
            if self.blk[ids[i]].refs == 0:
                hits += 1
                if hits > room:
                    return True
        return False

    cdef void _reference_ids(self, array.array ids) noexcept:
        """:meth:`_reference` of a block list (ids from the map)."""
        cdef Py_ssize_t i, n = Py_SIZE(ids)
        for i in range(n):
            if i + LEAD_BLOCK < n:  # as in _free_hits_over
                __builtin_prefetch(&self.blk[ids.data.as_ints[i + LEAD_BLOCK]])
            self._reference_one(ids.data.as_ints[i])

    cdef int _cache_chain_one(self, int32_t b, object chain, int64_t us, int64_t bs, Py_ssize_t i) except -1:
        """:meth:`_cache_one` of block ``b`` under block ``i``'s hash (``chain`` reaches its
        unit); 1 if it was registered."""
        cdef Cursor c
        cdef int64_t k = 0
        self._cursor_at(&c, chain, us, bs, i)
        if self._cursor_fits(&c, &k):
            return self._cache_int(b, k)
        return self._cache_obj(b, self._cursor_big(&c, chain))

    cdef inline int _cache_int(self, int32_t b, int64_t k) except -1:
        """Register block ``b`` under the int64 hash ``k`` unless either is taken; 1 if it was.

        :meth:`_find` and :meth:`_put` in one walk of ``k``'s probe run (:meth:`_probe`): a hash
        not held ends at the empty slot it is stored in (most registrations: one probe, not two)."""
        if self.blk[b].hval != NO_HASH:
            return 0
        cdef uint32_t h = <uint32_t>_mix(<uint64_t>k)
        cdef uint64_t i = self._probe(k, h)
        if self.table[i].block >= 0:
            return 0  # held by another block
        if self.blk[b].refs <= 0:
            raise RuntimeError(f"caching block {b}, which is not in use")
        self.blk[b].hval = k
        self._store(i, h, b)
        return 1

    cdef int _cache_obj(self, int32_t b, object h) except -1:
        """:meth:`_cache_int` for a hash given as a Python int."""
        if self.blk[b].hval != NO_HASH or self._find_obj(h) >= 0:
            return 0
        if self.blk[b].refs <= 0:
            raise RuntimeError(f"caching block {b}, which is not in use")
        self._insert_obj(h, b)
        return 1

    def chain_cache(self, array.array blocks not None, object chain, int64_t us, int64_t bs, Py_ssize_t start,
                    Py_ssize_t stop) -> int:
        """:meth:`cache_full_blocks` of ``blocks[start:stop]`` (a block list) under blocks
        ``start..stop-1``'s hashes."""
        _check_ids(blocks)
        if stop > Py_SIZE(blocks):
            raise ValueError(f"caching blocks up to {stop} of a request holding {Py_SIZE(blocks)}")
        if start < 0:
            raise ValueError(f"caching blocks from {start}")
        self._check_chain(chain, us, bs, stop)
        cdef int n = 0
        if start >= stop:
            return n
        cdef Cursor c, ahead  # ``ahead``: LEAD blocks on, whose map slot is prefetched
        cdef Py_ssize_t i, LEAD = 12
        cdef int64_t k = 0, ka = 0
        cdef int32_t b
        self._cursor_at(&c, chain, us, bs, start)
        if start + LEAD < stop:
            self._cursor_at(&ahead, chain, us, bs, start + LEAD)
        for i in range(start, stop):
            if i + LEAD < stop:
                if self._cursor_fits(&ahead, &ka):
                    self._prefetch_slot(ka)
                self._cursor_next(&ahead, chain, i + LEAD + 1 < stop)
            # As _cache_chain_one, written out: through a helper taking the cursor by pointer,
            # GCC keeps it in memory and this loop takes ~13% more instructions.
            b = self._id(blocks.data.as_ints[i])
            if self._cursor_fits(&c, &k):
                n += self._cache_int(b, k)
            else:
                n += self._cache_obj(b, self._cursor_big(&c, chain))
            self._cursor_next(&c, chain, i + 1 < stop)
        return n

    # ------------------------------------------------------------------ pool operations
    cdef int _reference(self, list blocks) except -1:
        """One more reference to each block of a prefix hit; a free one leaves the free list."""
        for ob in blocks:
            self._reference_one(<int32_t>ob)
        return 0

    cdef inline void _reference_one(self, int32_t b) noexcept:
        if self.blk[b].refs == 0:
            self._unlink(b)
        self.blk[b].refs += 1

    def find_cached_prefix(self, hashes) -> int:
        """Number of leading ``hashes`` present in the map."""
        cdef int n = 0
        for h in hashes:
            if self._find_obj(h) < 0:
                break
            n += 1
        return n

    def get(self, h):
        """The block cached under ``h``, or None."""
        cdef int32_t b = self._find_obj(h)
        return None if b < 0 else b

    def count_free(self, hashes) -> int:
        """How many of the (cached) ``hashes`` sit on free blocks."""
        cdef int n = 0
        cdef int32_t b
        for h in hashes:
            b = self._find_obj(h)
            if b < 0:
                raise KeyError(h)
            if self.blk[b].refs == 0:
                n += 1
        return n

    def take_cached(self, hashes) -> list:
        """Reference the blocks of the cached ``hashes``; a free one leaves the free list."""
        cdef list out = []
        cdef int32_t b
        for h in hashes:
            b = self._find_obj(h)
            if b < 0:
                raise KeyError(h)
            out.append(b)
        self._reference(out)
        return out

    def allocate(self, int n, list removed=None) -> list:
        """``n`` blocks from the free list's head (callers check ``n <= num_free``).

        Hashes evicted by recycling cached blocks are appended to ``removed`` if given.
        """
        if n > self.num_free:
            raise ValueError(f"allocating {n} blocks with {self.num_free} free")
        cdef array.array ids = array.clone(_EMPTY_IDS, n if n > 0 else 0, False)
        self._take_into(ids.data.as_ints, n, removed)
        return ids.tolist()

    def allocate_to(self, array.array blocks not None, int n, list removed=None) -> None:
        """:meth:`allocate` appending the ``n`` blocks to the block list ``blocks``."""
        _check_ids(blocks)
        if n > self.num_free:
            raise ValueError(f"allocating {n} blocks with {self.num_free} free")
        if n <= 0:
            return
        cdef Py_ssize_t have = Py_SIZE(blocks)
        array.resize_smart(blocks, have + n)
        self._take_into(blocks.data.as_ints + have, n, removed)

    cdef int _take_into(self, int* out, int n, list removed) except -1:
        """Take ``n`` (<= num_free) blocks from the free queue's head into ``out[0..n-1]``."""
        cdef int i
        for i in range(n):
            out[i] = self._take_head(removed)
        return 0

    def free(self, blocks) -> None:
        """Drop one reference to each block, in order; unreferenced ones join the tail."""
        for ob in blocks:
            self._free_one(self._block(ob))

    def free_tail_first(self, array.array blocks not None) -> None:
        """:meth:`free` of ``reversed(blocks)`` (a request's block list, its last recycled first)."""
        _check_ids(blocks)
        cdef int* ids = blocks.data.as_ints
        cdef Py_ssize_t i
        cdef int ahead
        for i in range(Py_SIZE(blocks) - 1, -1, -1):
            if i >= 12:  # the pool's work is cache misses: start loading a block a few ahead
                ahead = ids[i - 12]
                if 0 <= ahead < self.num_blocks:  # else the free that reaches it raises, in order
                    __builtin_prefetch(&self.blk[ahead])
            self._free_one(self._id(ids[i]))

    cdef inline int _free_one(self, int32_t b) except -1:
        if self.blk[b].refs <= 0:
            raise RuntimeError(f"freeing block {b}, which is not in use")
        self.blk[b].refs -= 1
        if self.blk[b].refs == 0:
            self._push_tail(b)
        return 0

    cdef inline int _cache_one(self, object ob, object h, list stored) except -1:
        """Register block ``ob`` under ``h`` unless either is taken; 1 if it was registered."""
        cdef int32_t b = self._block(ob)
        if self.blk[b].hval != NO_HASH or self._find_obj(h) >= 0:
            return 0
        if self.blk[b].refs <= 0:
            raise RuntimeError(f"caching block {b}, which is not in use")
        self._insert_obj(h, b)
        if stored is not None:
            stored.append(h)
        return 1

    def cache_full_blocks(self, blocks, hashes, list stored=None) -> int:
        """Register ``blocks`` under ``hashes`` (pairwise), skipping cached blocks and held hashes."""
        cdef int n = 0
        cdef Py_ssize_t i, m
        if type(blocks) is list and type(hashes) is list:  # what the engines pass: no zip
            m = min(len(<list>blocks), len(<list>hashes))
            for i in range(m):
                n += self._cache_one((<list>blocks)[i], (<list>hashes)[i], stored)
            return n
        for ob, h in zip(blocks, hashes):
            n += self._cache_one(ob, h, stored)
        return n

    # ------------------------------------------------------------------ views and checks
    def ref(self, b) -> int:
        return self.blk[self._block(b)].refs

    def hash_of(self, b):
        """The hash block ``b`` is cached under, or None."""
        return self._hash_of(self._block(b))

    def refs_list(self) -> list:
        return [self.blk[b].refs for b in range(self.num_blocks)]

    def hashes_list(self) -> list:
        return [self._hash_of(b) for b in range(self.num_blocks)]

    def free_order(self) -> list:
        """The free blocks, head (next recycled) first."""
        cdef list out = []
        cdef int64_t p
        for p in range(self.rhead, self.rtail):
            if self._live(p):
                out.append(self.ring[p & self.rmask])
        return out

    def cached_map(self) -> dict:
        """``{hash: block}`` of every cached block."""
        return {self._hash_of(b): b for b in range(self.num_blocks) if self.blk[b].hval != NO_HASH}

    def uncache_log_position(self) -> int:
        """Hashes dropped from the map so far (the uncache log's absolute end)."""
        return self.ubase + self.ulen

    def check(self) -> None:
        """Raise AssertionError unless the free list, reference counts and map agree."""
        cdef int32_t b
        cdef int64_t p
        cdef int seen = 0, cached = 0, unreferenced = 0
        assert 0 <= self.rtail - self.rhead <= <int64_t>self.rmask + 1, "free ring overfull"
        for p in range(self.rhead, self.rtail):
            b = self.ring[p & self.rmask]
            assert 0 <= b < self.num_blocks, f"free ring holds {b}"
            if self._live(p):
                assert self.blk[b].refs == 0, f"block {b} on the free list but in use"
                seen += 1
        assert seen == self.num_free, (seen, self.num_free)
        for b in range(self.num_blocks):
            assert self.blk[b].refs >= 0, b
            unreferenced += self.blk[b].refs == 0
            if self.blk[b].refs == 0:  # its queue entry lies in the ring's live range
                p = self.rhead + ((self.blk[b].qpos - (self.rhead & QMASK)) & QMASK)
                assert self.rhead <= p < self.rtail and self.ring[p & self.rmask] == b, f"free block {b} not queued"
            else:
                assert self.blk[b].qpos == -1, f"block {b} in use but queued"
            if self.blk[b].hval != NO_HASH:
                cached += 1
                assert self._find_obj(self._hash_of(b)) == b, f"block {b}'s hash not mapped to it"
        assert cached == self.num_cached, (cached, self.num_cached)
        assert unreferenced == seen, f"{unreferenced} unreferenced blocks, {seen} on the free list"
        assert len(self.big) == len(self.big_of), "big-hash maps disagree"
