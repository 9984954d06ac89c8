# The compiled event queue (sim/_event_core.pyx), declared for the modules that call it in C.
from libc.stdint cimport int64_t

from servesim._heap cimport Heap


cdef class EventQueue:
    cdef Heap h
    cdef int64_t seq
    cdef public double time
    cdef public int64_t kind

    cpdef push(self, double time, int64_t priority, int64_t kind, object payload=*)
    cpdef object pop(self)
    cpdef double peek_time(self)
