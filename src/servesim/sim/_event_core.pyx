# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled :class:`servesim.sim.events.EventQueue`: the same events and order, in the C heap
of ``servesim/_heap.pxd`` (each entry ``(time, priority, insertion, kind)`` holding its
payload; insertion numbers are unique, so ``kind`` never decides the order)."""

from libc.stdint cimport int64_t

from servesim._heap cimport HeapEntry, heap_free, heap_init, heap_pop, heap_push


cdef class EventQueue:
    """Heap of events by ``(time, priority, insertion)``; :meth:`pop` returns the payload and
    leaves the popped event's ``time`` and ``kind`` on the queue."""

    def __cinit__(self):
        heap_init(&self.h)
        self.seq = 0
        self.time = 0.0
        self.kind = 0

    def __dealloc__(self):
        heap_free(&self.h)

    def __len__(self):
        return self.h.size

    cpdef push(self, double time, int64_t priority, int64_t kind, object payload=None):
        cdef HeapEntry e
        e.time, e.k1, e.k2, e.k3, e.k4 = time, priority, self.seq + 1, kind, 0
        heap_push(&self.h, e, payload)
        self.seq += 1

    cpdef object pop(self):
        """The earliest event's payload (its time and kind in ``time``, ``kind``)."""
        cdef HeapEntry top
        payload = heap_pop(&self.h, &top)
        self.time, self.kind = top.time, top.k3
        return payload

    cpdef double peek_time(self):
        """The earliest event's time (infinity when empty)."""
        return self.h.a[0].time if self.h.size else float("inf")
