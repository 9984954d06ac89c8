# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled :class:`servesim.sim.events.EventQueue`: the same events and order, in a C array of
structs holding a reference to each payload."""

from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdlib cimport free, realloc


cdef inline bint _before(Event* a, Event* b) noexcept nogil:
    if a.time != b.time:
        return a.time < b.time
    if a.priority != b.priority:
        return a.priority < b.priority
    return a.seq < b.seq


cdef class EventQueue:
    """Heap of events by ``(time, priority, insertion)``; :meth:`pop` returns the payload and
    leaves the popped event's ``time`` and ``kind`` on the queue."""

    def __cinit__(self):
        self.a = NULL
        self.size = self.cap = 0
        self.seq = 0
        self.time = 0.0
        self.kind = 0

    def __dealloc__(self):
        cdef Py_ssize_t i
        for i in range(self.size):
            Py_DECREF(<object>self.a[i].payload)
        free(self.a)

    def __len__(self):
        return self.size

    cpdef push(self, double time, int64_t priority, int64_t kind, object payload=None):
        cdef Py_ssize_t i, parent
        cdef Event e
        cdef Event* grown
        if self.size == self.cap:
            grown = <Event*>realloc(self.a, (2 * self.cap + 64) * sizeof(Event))
            if grown is NULL:
                raise MemoryError()
            self.a = grown
            self.cap = 2 * self.cap + 64
        self.seq += 1
        e.time, e.priority, e.seq, e.kind = time, priority, self.seq, kind
        Py_INCREF(payload)
        e.payload = <PyObject*>payload
        i = self.size
        self.size += 1
        while i > 0:  # sift up
            parent = (i - 1) >> 1
            if not _before(&e, &self.a[parent]):
                break
            self.a[i] = self.a[parent]
            i = parent
        self.a[i] = e

    cpdef object pop(self):
        """The earliest event's payload (its time and kind in ``time``, ``kind``)."""
        if self.size == 0:
            raise IndexError("pop from an empty event queue")
        cdef Event top = self.a[0]
        cdef Event last
        cdef Py_ssize_t i = 0, child, n
        self.size -= 1
        n = self.size
        if n:
            last = self.a[n]
            while True:  # sift the last event down from the root
                child = 2 * i + 1
                if child >= n:
                    break
                if child + 1 < n and _before(&self.a[child + 1], &self.a[child]):
                    child += 1
                if not _before(&self.a[child], &last):
                    break
                self.a[i] = self.a[child]
                i = child
            self.a[i] = last
        self.time, self.kind = top.time, top.kind
        payload = <object>top.payload
        Py_DECREF(payload)  # the queue's reference; ``payload`` holds its own
        return payload

    cpdef double peek_time(self):
        """The earliest event's time (infinity when empty)."""
        return self.a[0].time if self.size else float("inf")
