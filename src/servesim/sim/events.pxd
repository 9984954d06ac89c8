# Types for compiling events.py with Cython (setup.py FROM_SOURCE; see radix_cache.pxd).
cdef class EventQueue:
    cdef public list _heap
    cdef public long long _seq

    cpdef push(self, object time, object priority, object kind, object payload=*)
    cpdef tuple pop(self)
