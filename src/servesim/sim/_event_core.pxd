# The compiled event queue (sim/_event_core.pyx), declared for the modules that call it in C.
from cpython.object cimport PyObject
from libc.stdint cimport int64_t


cdef struct Event:
    double time
    int64_t priority
    int64_t seq
    int64_t kind
    PyObject* payload


cdef class EventQueue:
    cdef Event* a
    cdef Py_ssize_t size, cap
    cdef int64_t seq
    cdef public double time
    cdef public int64_t kind

    cpdef push(self, double time, int64_t priority, int64_t kind, object payload=*)
    cpdef object pop(self)
    cpdef double peek_time(self)
