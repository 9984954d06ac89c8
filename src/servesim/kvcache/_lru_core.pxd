# The compiled LRU pool core's type (kvcache/_lru_core.pyx), for the modules that work on its
# state in C: the vLLM model's decode replay (engines/vllm/_decode_replay.pyx) cimports it.
# The block-list helpers below are inline functions shared by both.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from cpython cimport array
from cpython.object cimport Py_SIZE
from servesim.kvcache.block_owner cimport BlockOwner


cdef struct Blk:
    int64_t hval  # the hash the block is cached under; NO_HASH: none, BIG_HASH: in the dicts (_lru_core.pyx)
    int32_t qpos  # its position in the free ring modulo 2**31 while it is free (refs 0), else -1
    int32_t refs


cdef struct Slot:
    uint32_t h  # the low 32 bits of the key's mixed hash: its home slot and a fingerprint
    int32_t block  # -1: empty; the key itself is the block's hval


cdef struct Cursor:
    # Walks a unit chain block by block (see ``LRUCore._cursor_at``): block ``i`` ends at
    # offset ``d`` (1..us) of unit ``j``, whose chain value is ``p`` when it fits in int64;
    # ``data``: the values of a chain list (kvcache/hashing.py:chain_list), else NULL.
    const int64_t* data
    int64_t us
    int64_t bs
    Py_ssize_t j
    int64_t d
    int64_t p
    bint fits


cdef inline const int64_t* _chain_data(object chain) noexcept:
    """The values of ``chain`` if it is a chain list (an ``array.array`` of typecode ``q``), else NULL."""
    if type(chain) is array.array and (<array.array>chain).ob_descr.typecode == b'q':
        return <const int64_t*>(<array.array>chain).data.as_longlongs
    return NULL


cdef inline int _check_ids(array.array ids) except -1:
    """Raise unless ``ids`` is a block list (typecode ``i``: C ints)."""
    if ids.ob_descr.typecode != b'i':
        raise TypeError(f"expected a block list (array.array of typecode 'i'), got typecode {ids.typecode!r}")
    return 0


cdef inline int _append_id(array.array ids, int32_t b) except -1:
    """Append block ``b`` to the block list ``ids`` (amortised growth, as ``list.append``)."""
    cdef Py_ssize_t n = Py_SIZE(ids)
    array.resize_smart(ids, n + 1)
    ids.data.as_ints[n] = b
    return 0


cdef inline array.array _ids_of(BlockOwner vr):
    """A request's ``blocks``, checked to be a block list."""
    cdef array.array ids = vr.blocks
    if ids is None:
        raise TypeError("expected a block list (array.array of typecode 'i'), got None")
    _check_ids(ids)
    return ids


cdef inline int64_t _unit_size(BlockOwner vr) except -1:
    """The tokens of one unit of the request's chain (its trace's block size)."""
    if vr.req is None:
        raise TypeError("a block owner without its request")
    return vr.req.block_size



cdef class LRUCore:
    cdef readonly int num_blocks
    cdef Blk* blk
    cdef int32_t* ring  # the free queue: entries at positions rhead..rtail-1, stale ones included
    cdef uint64_t rmask  # ring capacity - 1 (a power of two, at least twice the blocks)
    cdef int64_t rhead
    cdef int64_t rtail
    cdef readonly int num_free
    cdef Slot* table  # key and block side by side: one cache line per probe
    cdef uint64_t tmask
    cdef readonly int num_cached
    cdef dict big  # hash -> block, for hashes outside int64
    cdef dict big_of  # block -> its hash outside int64
    # The uncache log: the blocks whose hash left the map, in order (``owner_prefix`` checks a
    # remembered lookup against the entries written since).  ``ulog[k]`` has the absolute
    # position ``ubase + k``; a full log restarts at 0 with ``ubase`` advanced, and a lookup
    # remembered before ``ubase`` is walked again.
    cdef int32_t* ulog
    cdef Py_ssize_t ulen
    cdef Py_ssize_t ucap
    cdef int64_t ubase
    # Marks of the remembered lookup being checked (one owner at a time, usually the request
    # at the head of the waiting queue): block ``b`` sits at position ``mpos[b]`` of the memo
    # of the owner whose ``memo_tag`` is ``mtag[b]``.  A mark left by a memo since cut can
    # only cut a later memo too early, which costs a walk, never a wrong answer.
    cdef int64_t* mtag
    cdef int32_t* mpos
    cdef int64_t wserial

    cdef inline int32_t _find_obj(self, object h) except -2
    cdef inline int _insert_obj(self, object h, int32_t b) except -1
    cdef inline int _uncache(self, int32_t b, list removed) except -1
    cdef inline object _hash_of(self, int32_t b)
    cdef inline void _prefetch_slot(self, int64_t k) noexcept
    cdef inline uint64_t _probe(self, int64_t k, uint32_t h) noexcept
    cdef inline void _store(self, uint64_t i, uint32_t h, int32_t b) noexcept
    cdef inline int32_t _find(self, int64_t k) noexcept
    cdef inline void _put(self, int64_t k, int32_t b) noexcept
    cdef void _delete(self, int64_t k) noexcept
    cdef inline bint _live(self, int64_t p) noexcept
    cdef inline void _unlink(self, int32_t b) noexcept
    cdef inline void _push_tail(self, int32_t b) noexcept
    cdef void _compact(self) noexcept
    cdef inline int64_t _head_pos(self) noexcept
    cdef inline int32_t _take_head(self, list removed) except -2
    cdef inline int32_t _block(self, object ob) except -1
    cdef inline int32_t _id(self, long long b) except -1
    cdef int _check_chain(self, object chain, int64_t us, int64_t bs, Py_ssize_t stop) except -1
    cdef inline int _cursor_load(self, Cursor* c, object chain) except -1
    cdef inline int _cursor_at(self, Cursor* c, object chain, int64_t us, int64_t bs, Py_ssize_t i) except -1
    cdef inline int _cursor_next(self, Cursor* c, object chain, bint load) except -1
    cdef inline bint _cursor_fits(self, Cursor* c, int64_t* k) noexcept
    cdef inline object _cursor_big(self, Cursor* c, object chain)
    cdef inline int32_t _cursor_find(self, Cursor* c, object chain) except -2
    cdef Py_ssize_t _owner_sync(self, BlockOwner o, int64_t us, int64_t bs, Py_ssize_t n) except -1
    cdef Py_ssize_t _walk_memo(self, BlockOwner o, array.array memo, int64_t us, int64_t bs, Py_ssize_t h,
                               Py_ssize_t n, int64_t tag) except -1
    cdef array.array _chain_blocks(self, object chain, int64_t us, int64_t bs, Py_ssize_t n)
    cdef Py_ssize_t _free_hits(self, array.array ids) noexcept
    cdef bint _free_hits_over(self, const int* ids, Py_ssize_t n, Py_ssize_t room) noexcept
    cdef void _reference_ids(self, array.array ids) noexcept
    cdef int _cache_chain_one(self, int32_t b, object chain, int64_t us, int64_t bs, Py_ssize_t i) except -1
    cdef inline int _cache_int(self, int32_t b, int64_t k) except -1
    cdef int _cache_obj(self, int32_t b, object h) except -1
    cdef int _reference(self, list blocks) except -1
    cdef inline void _reference_one(self, int32_t b) noexcept
    cdef int _take_into(self, int* out, int n, list removed) except -1
    cdef inline int _free_one(self, int32_t b) except -1
    cdef inline int _cache_one(self, object ob, object h, list stored) except -1
