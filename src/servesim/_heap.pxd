# A binary min-heap of C structs holding one Python reference each, shared by the compiled
# event queue (sim/_event_core.pyx) and the radix cache's lazy eviction heap
# (kvcache/_lazy_heap.pyx).  Entries order by (time, k1, k2, k3, k4); each user fills the
# fields its order needs and leaves the rest equal.  The heap holds a reference to each
# entry's object: :func:`heap_push` takes it, :func:`heap_pop` hands it back.
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdint cimport int64_t
from libc.stdlib cimport free, realloc


cdef struct HeapEntry:
    double time
    int64_t k1
    int64_t k2
    int64_t k3
    int64_t k4
    PyObject* obj


cdef struct Heap:
    HeapEntry* a
    Py_ssize_t size
    Py_ssize_t cap


cdef inline bint entry_before(const HeapEntry* a, const HeapEntry* b) noexcept nogil:
    if a.time != b.time:
        return a.time < b.time
    if a.k1 != b.k1:
        return a.k1 < b.k1
    if a.k2 != b.k2:
        return a.k2 < b.k2
    if a.k3 != b.k3:
        return a.k3 < b.k3
    return a.k4 < b.k4


cdef inline void heap_clear(Heap* h) noexcept:
    """Drop every entry's reference (the storage stays for reuse)."""
    cdef Py_ssize_t i
    for i in range(h.size):
        Py_DECREF(<object>h.a[i].obj)
    h.size = 0


cdef inline void heap_init(Heap* h) noexcept:
    h.a = NULL
    h.size = h.cap = 0


cdef inline void heap_free(Heap* h) noexcept:
    """Drop every entry's reference and the storage (for ``__dealloc__``)."""
    heap_clear(h)
    free(h.a)
    h.a = NULL
    h.cap = 0


cdef inline int heap_push(Heap* h, HeapEntry e, object obj) except -1:
    """Add ``e`` holding ``obj`` (the heap takes a reference to it)."""
    cdef Py_ssize_t i, parent
    cdef HeapEntry* grown
    if h.size == h.cap:
        grown = <HeapEntry*>realloc(h.a, (2 * h.cap + 64) * sizeof(HeapEntry))
        if grown is NULL:
            raise MemoryError()
        h.a = grown
        h.cap = 2 * h.cap + 64
    Py_INCREF(obj)
    e.obj = <PyObject*>obj
    i = h.size
    h.size += 1
    while i > 0:  # sift up
        parent = (i - 1) >> 1
        if not entry_before(&e, &h.a[parent]):
            break
        h.a[i] = h.a[parent]
        i = parent
    h.a[i] = e
    return 0


cdef inline object heap_pop(Heap* h, HeapEntry* top):
    """Remove the smallest entry, copied to ``top``; returns its object (the heap's reference
    passes to the caller).  Raises IndexError on an empty heap."""
    if h.size == 0:
        raise IndexError("pop from an empty heap")
    top[0] = h.a[0]
    cdef HeapEntry last
    cdef Py_ssize_t i = 0, child, n
    h.size -= 1
    n = h.size
    if n:
        last = h.a[n]
        while True:  # sift the last entry down from the root
            child = 2 * i + 1
            if child >= n:
                break
            if child + 1 < n and entry_before(&h.a[child + 1], &h.a[child]):
                child += 1
            if not entry_before(&h.a[child], &last):
                break
            h.a[i] = h.a[child]
            i = child
        h.a[i] = last
    obj = <object>top.obj  # a new reference ...
    Py_DECREF(obj)  # ... replacing the heap's
    return obj
