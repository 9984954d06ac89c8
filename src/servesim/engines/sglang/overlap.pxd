# Types for compiling overlap.py with Cython (setup.py FROM_SOURCE; see kvcache/radix_cache.pxd).
# fast_path.pxd and scheduler.pxd cimport the class: the scheduler asks it about every pass
# (what a pull sees, whether the loop spins, a pass decided or ended), now as C calls.


cdef class OverlapLag:
    cdef public double decided_at
    cdef public double last_end
    cdef public object ghost_ctx

    cpdef double cutoff(self, double now)
    cpdef bint spins(self)
    cpdef decided(self, double now, bint launched)
    cpdef ended(self, double end, object last_start=*)
    cpdef joined_idle(self, double now)
