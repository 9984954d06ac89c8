# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled :class:`servesim.sim.events.EventQueue`: the same events and order, in the C heap
of ``servesim/_heap.pxd`` (each entry ``(time, priority, insertion, kind)`` holding its
payload; insertion numbers are unique, so ``kind`` never decides the order)."""

from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdlib cimport free

from servesim._heap cimport HeapEntry, heap_clear, heap_pop, heap_push


cdef class EventQueue:
    """Heap of events by ``(time, priority, insertion)``; :meth:`pop` returns the payload and
    leaves the popped event's ``time`` and ``kind`` on the queue."""

    def __cinit__(self):
        self.h.a = NULL
        self.h.size = self.h.cap = 0
        self.seq = 0
        self.time = 0.0
        self.kind = 0

    def __dealloc__(self):
        heap_clear(&self.h)
        free(self.h.a)

    def __len__(self):
        return self.h.size

    cpdef push(self, double time, int64_t priority, int64_t kind, object payload=None):
        cdef HeapEntry e
        e.time, e.k1, e.k2, e.k3, e.k4 = time, priority, self.seq + 1, kind, 0
        Py_INCREF(payload)
        e.obj = <PyObject*>payload
        try:
            heap_push(&self.h, e)
        except MemoryError:
            Py_DECREF(payload)
            raise
        self.seq += 1

    cpdef object pop(self):
        """The earliest event's payload (its time and kind in ``time``, ``kind``)."""
        if self.h.size == 0:
            raise IndexError("pop from an empty event queue")
        cdef HeapEntry top = heap_pop(&self.h)
        self.time, self.kind = top.time, top.k3
        payload = <object>top.obj
        Py_DECREF(payload)  # the queue's reference; ``payload`` holds its own
        return payload

    cpdef double peek_time(self):
        """The earliest event's time (infinity when empty)."""
        return self.h.a[0].time if self.h.size else float("inf")
