# Types for compiling request.py with Cython (setup.py FROM_SOURCE; see kvcache/radix_cache.pxd).
# Counts and times are C fields: a compiled module that types a name as Request reads them
# from the struct; other code gets Python numbers, as from the plain class.

cdef class Request:
    cdef public long long index
    cdef public object request_id
    cdef public double arrival
    cdef public long long input_length
    cdef public long long output_length
    cdef public object hash_ids
    cdef public long long block_size
    cdef public object session_id
    cdef public long long turn
    cdef public object after
    cdef public double delay
    cdef public object output_hash_ids
    cdef public bint warmup

    cpdef tuple fields(self)
