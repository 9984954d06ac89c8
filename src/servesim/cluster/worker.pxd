# Types for compiling worker.py with Cython (setup.py FROM_SOURCE; see radix_cache.pxd).
cimport cython
from servesim.perf.plan cimport PassPlan


cdef class Worker:
    cdef public object worker_id
    cdef public object engine
    cdef public object step_time
    cdef public object gpus
    cdef public bint fast_forward
    cdef public object stretch_ends
    cdef public object stretch_plan
    cdef public object stretches
    cdef public object starts
    cdef public bint busy
    cdef public PassPlan plan
    cdef public long long n_passes
    cdef public double end
    cdef public object ends
    cdef public double start
    cdef public long long epoch
    cdef public object cut_at
    cdef public bint settle_on_input
    cdef public object timeseries
    cdef public double busy_time
    cdef public long long passes
    cdef public long long tokens
    cdef public long long last_pass_tokens
    cdef public long long input_lag

    @cython.locals(plan=PassPlan)
    cpdef object start_pass(self, double now)
    cpdef _hold(self, object ends)
    cpdef _keep_first(self, long long k)
    cpdef object truncate(self, double t)
    @cython.locals(plan=PassPlan)
    cpdef bint settle(self, double t) except? -1
    cpdef close_at(self, double t)
    @cython.locals(plan=PassPlan, s=cython.Py_ssize_t, t=cython.double, start=cython.double)
    cpdef double finish_pass(self) except? -1.0
