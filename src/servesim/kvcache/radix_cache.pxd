# Types for compiling radix_cache.py with Cython (setup.py, FROM_SOURCE): the .py stays the
# one source and runs as it is without a build; compiled, the nodes and the tree become C
# structs and these locals C integers.  Every attribute of the two classes must be declared
# here (an undeclared one raises AttributeError in the compiled module only).
cimport cython
from servesim.kvcache.token_pool cimport TokenPool
from servesim.workload.request cimport Request


cdef class RadixNode:
    cdef public long long uid
    cdef public list segs
    cdef public Request req
    cdef public long long start
    cdef public long long ntok
    cdef public dict children
    cdef public RadixNode parent
    cdef public long long lock_ref
    cdef public double last_access
    cdef public long long last_seq
    cdef public long long access_count
    cdef public double insert_time
    cdef public long long insert_seq
    cdef public object block_id


cdef class MatchResult:
    cdef public long long tokens
    cdef public RadixNode node


cdef class RadixCache:
    cdef public TokenPool pool
    cdef public long long page_size
    cdef public object policy
    cdef public bint disable
    cdef public object on_event
    cdef public object tier
    cdef public object on_evict
    cdef public double now
    cdef public long long _seq
    cdef public object _uids
    cdef public RadixNode root
    cdef public long long evictable_size
    cdef public long long protected_size
    cdef public set _evictable_leaves
    cdef public bint _lazy
    cdef public int _lazy_kind
    cdef public object _heap

    cpdef _add_leaf(self, RadixNode node)
    cpdef _lazy_push(self, RadixNode node)
    cpdef bint _lazy_current(self, RadixNode node, long long k1, long long k2) except? -1
    cpdef _rebuild_heap(self)

    @cython.locals(total=cython.longlong, aligned=cython.longlong)
    cpdef tuple _aligned_segments(self, object units, object n_tokens)

    cpdef tuple _walk(self, list segs)

    @cython.locals(seq=cython.longlong, now=cython.double, root=RadixNode)
    cpdef _touch_path(self, RadixNode node)

    @cython.locals(seq=cython.longlong, now=cython.double, page=cython.longlong,
                   child=RadixNode, n=cython.Py_ssize_t, m=cython.longlong)
    cpdef tuple _descend(self, RadixNode node, list segs, Py_ssize_t i, long long s, long long total)

    @cython.locals(seq=cython.longlong, now=cython.double, page=cython.longlong, bs=cython.longlong,
                   node=RadixNode, child=RadixNode, pos=cython.longlong, m=cython.longlong)
    cpdef MatchResult match_request(self, Request req, long long stop)

    @cython.locals(seq=cython.longlong, now=cython.double, page=cython.longlong, bs=cython.longlong,
                   child=RadixNode, m=cython.longlong)
    cpdef tuple _descend_request(self, RadixNode node, Request req, long long pos, long long stop)

    @cython.locals(parent=RadixNode, new=RadixNode)
    cpdef RadixNode _split(self, RadixNode child, long long m)

    @cython.locals(end=RadixNode)
    cpdef tuple insert_and_match(self, object units, object n_tokens=*)

    cpdef long long insert_request_after(self, Request req, RadixNode below, long long prefix,
                                         long long end) except? -1

    @cython.locals(last=RadixNode)
    cpdef tuple insert_request_after_and_match(self, Request req, RadixNode below, long long prefix, long long end)

    @cython.locals(pos=cython.longlong, node=RadixNode, leaf=RadixNode)
    cpdef tuple _insert_request_after(self, Request req, RadixNode below, long long prefix, long long end)

    @cython.locals(node=RadixNode, prefix=cython.longlong, i=cython.Py_ssize_t, s=cython.longlong)
    cpdef tuple _insert_segments(self, list segs)

    cpdef long long insert_after(self, list segs, RadixNode below, long long prefix, long long end=*) except? -1

    @cython.locals(last=RadixNode, present=cython.longlong)
    cpdef tuple insert_after_and_match(self, list segs, RadixNode below, long long prefix, long long end=*)

    @cython.locals(node=RadixNode, total=cython.longlong, i=cython.Py_ssize_t, s=cython.longlong)
    cpdef tuple _insert_after(self, list segs, RadixNode below, long long prefix, long long end=*)

    @cython.locals(leaf=RadixNode)
    cpdef tuple _add_rest(self, list segs, long long prefix, RadixNode node, Py_ssize_t i, long long s,
                          long long end=*)

    cpdef _attach_leaf(self, RadixNode node, RadixNode leaf)

    @cython.locals(delta=cython.longlong, root=RadixNode)
    cpdef long long inc_lock_ref(self, RadixNode node) except? -1

    @cython.locals(delta=cython.longlong, root=RadixNode)
    cpdef long long dec_lock_ref(self, RadixNode node) except? -1

    cpdef _check_attached(self, RadixNode node)

    @cython.locals(freed=cython.longlong, node=RadixNode, parent=RadixNode, leaves=set)
    cpdef long long _evict_lazy(self, long long num_tokens) except? -1

    @cython.locals(parent=RadixNode, leaves=set)
    cpdef RadixNode _remove_leaf(self, RadixNode node)

    @cython.locals(short=cython.longlong)
    cpdef bint alloc(self, long long n, bint evict=*) except? -1

    cpdef free(self, long long n)


@cython.locals(n_ids=cython.Py_ssize_t)
cdef object _request_block(Request req, long long k)

@cython.locals(bs=cython.longlong, m=cython.longlong, k=cython.longlong, base=cython.longlong, s=cython.longlong,
               e=cython.longlong, end=cython.longlong, ks=cython.longlong, ke=cython.longlong)
cdef long long _request_common_prefix(list key, Request req, long long pos, long long stop) except? -1

@cython.locals(req=Request, bs=cython.longlong, pos=cython.longlong, stop=cython.longlong, m=cython.longlong,
               n=cython.Py_ssize_t, k=cython.longlong, ks=cython.longlong, ke=cython.longlong, e=cython.longlong,
               end=cython.longlong)
cdef tuple _key_common_prefix(RadixNode node, list segs, Py_ssize_t i, long long s)

@cython.locals(bs=cython.longlong, end=cython.longlong, k=cython.longlong, last=cython.longlong)
cdef long long _run_common_prefix(Request owner, long long key_end, Request req, long long pos,
                                  long long stop) except? -1

@cython.locals(x=object, y=object)
cdef Py_ssize_t _same_ids(tuple a, tuple b, Py_ssize_t k, Py_ssize_t stop) except -1
