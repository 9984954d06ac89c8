# Types for compiling simulation.py with Cython (setup.py FROM_SOURCE; see radix_cache.pxd).
cimport cython
from servesim.cluster.worker cimport Worker
from servesim.sim._event_core cimport EventQueue
from servesim.workload.request cimport Request


cdef class Simulation:
    cdef public object in_flight
    cdef public object disagg
    cdef public object source
    cdef public object mode
    cdef public object concurrency
    cdef public list workers
    cdef public object router
    cdef public object rec
    cdef public object ts
    cdef public double max_sim_time
    cdef public object progress
    cdef public EventQueue events
    cdef public object stats
    cdef public bint _exhausted
    cdef public object _lookahead
    cdef public dict _waiting_turns
    cdef public dict _ended
    cdef public long long _in_flight
    cdef public long long _warmups_left
    cdef public object _held
    cdef public set _dirty
    cdef public long long _terminated
    cdef public object frontend
    cdef public dict _sent
    cdef public dict _handlers
    cdef public object _terminal_listener
    cdef public object _pass_listener
    cdef public dict _aborts
    cdef public dict _abort_on_arrival

    cpdef post(self, double time, long long kind, object payload)
    @cython.locals(ev_epoch=cython.longlong)
    cpdef deliver(self, Worker worker, Request req, double now, long long kv_ready=*)
    cpdef submit(self, Request req, double now)

    @cython.locals(req=Request)
    cpdef object _pull(self)
    @cython.locals(req=Request)
    cpdef _feed_open(self, double now)
    @cython.locals(follow=Request)
    cpdef _on_terminated(self, Request req, double t)
    @cython.locals(eng=object)
    cpdef _drain_terminated(self, Worker worker, double t)
    @cython.locals(now=cython.double)
    cpdef object run(self)
    @cython.locals(now=cython.double, n_events=cython.longlong, events=EventQueue, kind=cython.longlong)
    cpdef double advance_to(self, double until)
    cpdef start_idle_workers(self, double now)
    cpdef double next_event_time(self)
    cpdef _advance_intake(self, double now)
    @cython.locals(worker=Worker)
    cpdef _handle_arrival(self, Request req, double now)
    @cython.locals(worker=Worker, epoch=cython.longlong)
    cpdef _handle_pass_end(self, tuple payload, double now)
    @cython.locals(worker=Worker)
    cpdef _start_idle_workers(self, double now)
