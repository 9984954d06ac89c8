"""Records what happens to each request, as columns, while the simulation runs.

Engines report events for arrays of request indices (tokens emitted by a pass, first
scheduling, finishing); the recorder updates numpy columns in bulk.  Inter-token gaps
are accumulated as (value, count) pairs, so memory grows with passes, not tokens (and
beyond a size they go into a sketch, see metrics/stats.py).

Memory at scale: ids are packed as Arrow strings and reasons as codes (metrics/strings.py);
past :data:`SPILL_AT` requests every column moves to a spill file whose old pages are
dropped from memory as the run goes on (metrics/columns.py), so resident memory is bounded
by the requests near the end of the columns, not by their number (docs/performance.md,
"Memory").
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

from servesim.compiled import compiled_module
from servesim.metrics.columns import Column
from servesim.metrics.stats import WeightedSamples
from servesim.metrics.strings import CodedStrings, StringColumn

NAN = float("nan")


class Status(IntEnum):
    """Terminal state of a request (``PENDING`` only while the simulation runs)."""

    PENDING = 0
    COMPLETED = 1
    REJECTED = 2
    UNFINISHED = 3
    #: Aborted before its end by whoever sent it (a client that disconnected from
    #: ``servesim serve``): the engine dropped it and freed its KV, as the real engines do.
    CANCELLED = 4


_PENDING = int(Status.PENDING)
#: Requests after which the columns move to spill files (metrics/columns.py).
SPILL_AT = 1 << 20
#: Requests at the end of the columns whose pages stay resident when older ones are dropped.
KEEP_RESIDENT = 1 << 16
_INT64 = np.dtype(np.int64)
#: The compiled emission, or None (bound at import: servesim/compiled.py's rule).
_core = compiled_module("metrics._emit_core")


def _as_int64(idx: np.ndarray) -> np.ndarray:
    """Request indices as the int64 array the compiled emitter takes (no copy when they are)."""
    return idx if idx.dtype is _INT64 else idx.astype(np.int64)


class RequestRecorder:
    """Column store of per-request milestones and counters."""

    FLOAT_COLUMNS = ("arrival", "first_scheduled", "first_token", "second_token", "last_token", "finish")
    INT_COLUMNS = (
        "input_length", "output_length", "cached_tokens", "host_cached_tokens", "generated",
        "emissions", "retractions", "worker", "status", "turn",
    )

    def __init__(self) -> None:
        self.size = 0
        self.cols: dict[str, Column] = {}
        for name in self.FLOAT_COLUMNS:
            self.cols[name] = Column(np.float64, NAN)
        for name in self.INT_COLUMNS:
            self.cols[name] = Column(np.int64, -1 if name == "worker" else 0)
        self.request_id = StringColumn()
        self.session_id = StringColumn()
        self.reason = CodedStrings()
        self.extra_columns: dict[str, Column] = {}
        #: Whether the columns live in spill files (past SPILL_AT requests).
        self.spilled = False
        self._itl = WeightedSamples()
        # Inter-token gaps of warm-up requests are kept apart so they can be excluded.
        self._itl_warmup = WeightedSamples()
        # Gaps not yet handed to the samples above: (value, count) pairs in plain lists,
        # flushed as arrays in chunks (one small array per pass would cost more).  The
        # compiled emitter keeps its own pending pairs in C arrays instead.
        self._gv: list[float] = []
        self._gw: list[int] = []
        self._wv: list[float] = []
        self._ww: list[int] = []
        self._warm = Column(np.bool_, False)
        self._any_warm = False
        # The hot columns, looked up once (their ``data`` arrays are replaced as they grow).
        self._c_first = self.cols["first_token"]
        self._c_second = self.cols["second_token"]
        self._c_last = self.cols["last_token"]
        self._c_em = self.cols["emissions"]
        # ``generated`` is kept as the tokens beyond one per emission (non-zero only under
        # speculative decoding), so a plain decode pass writes two columns, not three;
        # :meth:`column` adds the emissions back.
        self._c_gen = self.cols["generated"]
        #: Indices every column (and the warm-up flags) can hold without growing.
        self._capacity = self._columns_capacity()
        #: The compiled emission (``metrics/_emit_core.pyx``), or None: the numpy version.
        self._kernel = _core
        #: Pending gaps held before they go to the samples (tests lower it to exercise flushing).
        self._flush_at = self._FLUSH
        self._emitter = None
        self._bind_columns()
        self._new_emitter()

    # -- registration -------------------------------------------------------------
    def register(self, index: int, request_id: str, session_id: str | None, turn: int,
                 input_length: int, output_length: int, warmup: bool) -> None:
        """Add a request as it enters the simulation (indices arrive densely in order)."""
        if index != self.size:
            raise AssertionError(f"request index {index} registered out of order (expected {self.size})")
        self.size += 1
        if self.size > self._capacity:  # columns double together: one check per request
            if not self.spilled and self.size > SPILL_AT:
                self._spill()
            for col in self.cols.values():
                col.ensure(self.size)
            self._warm.ensure(self.size)
            self._capacity = self._columns_capacity()
            self._bind_columns()  # the columns are new arrays
            self._new_emitter()
            if self.spilled:
                self.release(self.size - KEEP_RESIDENT)
        for col in self.extra_columns.values():
            col.ensure(self.size)
        self._in_v[index] = input_length
        self._out_v[index] = output_length
        self._turn_v[index] = turn
        self._warm.data[index] = warmup
        if warmup and not self._any_warm:
            self._any_warm = True
            if self._emitter is not None:
                self._emitter.any_warm = True
        self.request_id.append(request_id)
        self.session_id.append(session_id)
        self.reason.append("")

    def _bind_columns(self) -> None:
        """Hold the arrays the per-request setters write (again whenever the columns grow).

        Compiled, these attributes are typed views (``recorder.pxd``): a setter is then a C
        store, where ``self.cols[name].data[index] = value`` costs a dict lookup, an
        attribute read and a numpy scalar write.
        """
        c = self.cols
        self._arrival_v = c["arrival"].data
        self._first_scheduled_v = c["first_scheduled"].data
        self._finish_v = c["finish"].data
        self._worker_v = c["worker"].data
        self._cached_v = c["cached_tokens"].data
        self._host_cached_v = c["host_cached_tokens"].data
        self._status_v = c["status"].data
        self._retractions_v = c["retractions"].data
        self._in_v = c["input_length"].data
        self._out_v = c["output_length"].data
        self._turn_v = c["turn"].data

    def _columns_capacity(self) -> int:
        """Indices every column (and the warm-up flags) can hold without growing."""
        return min(self._warm.ready, *[col.ready for col in self.cols.values()])

    def _all_columns(self) -> list:
        return [*self.cols.values(), self._warm, self.reason.codes, *self.extra_columns.values()]

    def _spill(self) -> None:
        """Move every column to a spill file sized for the most requests a run may hold."""
        from servesim.metrics.columns import MAX_REQUESTS

        for col in self._all_columns():
            col.spill(max(MAX_REQUESTS, self.size * 2), self.size)
        self.spilled = True

    def release(self, stop: int) -> None:
        """Drop from memory the column pages of requests ``< stop`` (spilled columns only:
        their values stay in the spill files and are read back when touched)."""
        if self.spilled and stop > 0:
            for col in self._all_columns():
                col.release(stop)

    @property
    def warmup(self) -> np.ndarray:
        """Whether each request is a warm-up request (as :attr:`is_warmup`)."""
        return self.is_warmup

    def extra(self, name: str, dtype=np.float64, fill=NAN) -> np.ndarray:
        """A named extra column (e.g. disaggregation milestones), created on first use."""
        col = self.extra_columns.get(name)
        if col is None:
            col = Column(dtype, fill, max(self.size, 1024))
            self.extra_columns[name] = col
            if self.spilled:
                from servesim.metrics.columns import MAX_REQUESTS

                col.spill(max(MAX_REQUESTS, self.size * 2), self.size)
        col.ensure(self.size)
        return col.data

    # -- events ---------------------------------------------------------------------
    def arrived(self, index: int, t: float) -> None:
        self._arrival_v[index] = t

    def assigned(self, index: int, worker: int) -> None:
        self._worker_v[index] = worker

    def scheduled(self, index: int, t: float, cached_tokens: int, host_cached_tokens: int = 0) -> None:
        """First time a request is put in a pass (later re-admissions after retraction keep it)."""
        if self._first_scheduled_v[index] != self._first_scheduled_v[index]:  # NaN: first scheduling
            self._first_scheduled_v[index] = t
            self._cached_v[index] = cached_tokens
            self._host_cached_v[index] = host_cached_tokens

    def retracted(self, index: int) -> None:
        self._retractions_v[index] += 1

    _FLUSH = 1 << 15

    @property
    def itl(self) -> WeightedSamples:
        """Inter-token gaps of measured requests, as (value, count) samples."""
        self._flush()
        return self._itl

    @property
    def itl_warmup(self) -> WeightedSamples:
        """Inter-token gaps of warm-up requests."""
        self._flush()
        return self._itl_warmup

    def _flush(self) -> None:
        if self._emitter is not None:
            self._emitter.flush()
        if self._gv:
            self._itl.add(np.array(self._gv, dtype=np.float64), np.array(self._gw, dtype=np.int32))
            self._gv.clear()
            self._gw.clear()
        if self._wv:
            self._itl_warmup.add(np.array(self._wv, dtype=np.float64), np.array(self._ww, dtype=np.int32))
            self._wv.clear()
            self._ww.clear()

    def _new_emitter(self) -> None:
        """(Re)build the compiled emitter over the current hot columns, its pending gaps
        handed to the samples first; its buffers hold :attr:`_flush_at` pairs."""
        if self._kernel is not None:
            if self._emitter is not None:
                self._emitter.flush()
            self._emitter = self._kernel.Emitter(
                self._c_em.data, self._c_last.data, self._c_first.data, self._c_second.data,
                self._warm.data.view(np.uint8), self._any_warm, self._itl, self._itl_warmup, self._flush_at)

    def emit(self, idx: np.ndarray, t: float, tokens_each: np.ndarray | int = 1) -> None:
        """Requests ``idx`` each received ``tokens_each`` output tokens at time ``t``."""
        if idx.size == 0:
            return
        if self._kernel is not None:
            self._emitter.emit(_as_int64(idx), t, NAN, False, t, 1)
        else:
            em = self._c_em.data
            last = self._c_last.data
            prev_em = em[idx]
            later = self._milestones(idx, prev_em, t, None)
            if later.size:
                self._emit_gaps(t - last[later], later)
            last[idx] = t
            em[idx] = prev_em + 1
        if not (isinstance(tokens_each, int) and tokens_each == 1):
            # ``generated`` stores only the tokens beyond one per emission (speculative decoding).
            self._c_gen.data[idx] += np.asarray(tokens_each) - 1

    def _flush_if_full(self) -> None:
        """Hand the pending gaps to the samples once either list passes :attr:`_flush_at`."""
        if len(self._gv) > self._flush_at or len(self._wv) > self._flush_at:
            self._flush()

    def _milestones(self, idx: np.ndarray, prev_em: np.ndarray, t: float, t_next: float | None) -> np.ndarray:
        """First / second token times of a pass at ``t``; returns the requests that emitted before.

        ``t_next``: the next pass's end when the pass opens a stretch (a first token's
        request gets its second token then).
        """
        if prev_em.min() >= 2:  # the common decode case: no first or second token
            return idx
        first = prev_em == 0
        if first.any():
            f = idx[first]
            self._c_first.data[f] = t
            if t_next is not None:
                self._c_second.data[f] = t_next
        second = prev_em == 1
        if second.any():
            self._c_second.data[idx[second]] = t
        return idx[~first]

    def _emit_gaps(self, gaps: np.ndarray, later: np.ndarray) -> None:
        """Gaps of requests ``later`` in one pass, warm-up requests kept apart."""
        if self._any_warm:
            warm = self._warm.data[later]
            if warm.any():
                self._add_gaps(gaps[warm], self._wv, self._ww)
                gaps = gaps[~warm]
        self._add_gaps(gaps, self._gv, self._gw)

    def _add_gaps(self, gaps: np.ndarray, values: list[float], counts: list[int]) -> None:
        """Append ``gaps`` as (value, count) pairs; a pass's gaps take one or two values."""
        n = gaps.size
        if n == 0:
            return
        g0 = gaps[0]
        same = gaps == g0
        k = int(np.count_nonzero(same))
        values.append(float(g0))
        counts.append(k)
        if k < n:
            rest = gaps[~same]
            g1 = rest[0]
            if bool((rest == g1).all()):
                values.append(float(g1))
                counts.append(int(rest.size))
            else:
                vals, cnts = np.unique(rest, return_counts=True)
                values.extend(vals.tolist())
                counts.extend(cnts.tolist())
        if len(values) > self._flush_at:
            self._flush()

    def emit_stretch(self, idx: np.ndarray, pass_ends: np.ndarray) -> None:
        """Requests ``idx`` each received one token at every time in ``pass_ends``.

        Equivalent to calling :meth:`emit` once per pass end (gaps recorded in the same
        order), used by the fast-forward of decode-only stretches; each column is read and
        written once for the whole stretch.
        """
        k = pass_ends.size
        if k == 0 or idx.size == 0:
            return
        t0 = float(pass_ends[0])
        if k == 1:
            self.emit(idx, t0)
            return
        if self._kernel is not None:  # the first pass's emission and every gap, in C
            self._emitter.emit_stretch(_as_int64(idx), pass_ends)
            return
        em = self._c_em.data
        last = self._c_last.data
        prev = em[idx]
        later = self._milestones(idx, prev, t0, float(pass_ends[1]))
        if later.size:
            self._emit_gaps(t0 - last[later], later)
        em[idx] = prev + k
        last[idx] = pass_ends[-1]
        n_warm = int(self._warm.data[idx].sum()) if self._any_warm else 0
        gaps = (pass_ends[1:] - pass_ends[:-1]).tolist()
        k1 = k - 1
        n_cold = idx.size - n_warm
        if n_cold:
            self._gv.extend(gaps)
            self._gw.extend([n_cold] * k1)
        if n_warm:
            self._wv.extend(gaps)
            self._ww.extend([n_warm] * k1)
        self._flush_if_full()

    def finished(self, index: int, t: float, status: Status, reason: str = "") -> None:
        # Compared with a plain int: a numpy integer compared with an IntEnum member takes ~8 µs.
        if self._status_v[index] != _PENDING:
            raise AssertionError(f"request {self.request_id[index]} reached a second terminal state")
        self._status_v[index] = status
        self._finish_v[index] = t
        self.reason[index] = reason

    def close_unfinished(self, t: float, reason: str, not_arrived: str | None = None) -> int:
        """Mark every request still pending as unfinished; returns how many.

        ``not_arrived``: the reason given instead to pending requests that never arrived
        (no arrival time: the workload would have sent them later).
        """
        c = self.cols
        st = c["status"].data[: self.size]
        pending = np.flatnonzero(st == Status.PENDING)
        st[pending] = int(Status.UNFINISHED)
        c["finish"].data[pending] = t
        arrived = ~np.isnan(c["arrival"].data[pending])
        for i, came in zip(pending.tolist(), arrived.tolist()):
            self.reason[i] = reason if came or not_arrived is None else not_arrived
        return int(pending.size)

    def generated_of(self, index: int) -> int:
        """Output tokens request ``index`` has received so far: ``column("generated")[index]``
        without building the column (a live reader asks after every pass)."""
        return int(self._c_em.data[index] + self._c_gen.data[index])

    # -- results ----------------------------------------------------------------------
    def column(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Column ``name`` for requests ``start:stop`` (default all); a view, except
        ``generated``, which is computed."""
        stop = self.size if stop is None else min(stop, self.size)
        if name == "generated":  # stored as the tokens beyond one per emission
            return self._c_gen.data[start:stop] + self._c_em.data[start:stop]
        col = self.cols.get(name) or self.extra_columns[name]
        return col.data[start:stop]

    @property
    def is_warmup(self) -> np.ndarray:
        return self._warm.data[: self.size]
