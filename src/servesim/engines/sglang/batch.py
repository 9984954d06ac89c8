"""SGLang's running batch as parallel columns, so a decode pass touches no Python object per request.

Position ``i`` holds the ``i``-th running request in admission order: its ``SGReq`` (in
``reqs``), request index, computed tokens, generated tokens, ``max_new`` and locked prefix.
While a request runs its progress lives here, not in its ``SGReq``; it is written back
(``computed``, ``generated``, ``alloc``) when the request leaves.

:class:`RunningBatch` is the numpy version and the reference; ``_sglang_batch_core.pyx``
compiles the same class (a decode stretch's few reductions over a batch of tens of requests
cost more in numpy's call overhead than in arithmetic).  :func:`new_running_batch` picks one;
``tests/engines/test_sglang_batch.py`` runs both through the same operations.
"""

from __future__ import annotations

import numpy as np

from servesim.compiled import compiled_module

#: ``left_min`` of an empty batch: larger than any request's remaining output.
NO_LIMIT = 1 << 62


class RunningBatch:
    """The running requests' progress as int64 columns (the reference version)."""

    def __init__(self, capacity: int = 64) -> None:
        self.n = 0
        #: The running requests (``SGReq``), in admission order.  Changed in place only, so
        #: the engine can keep a reference to it.
        self.reqs: list = []
        self._idx = np.zeros(capacity, dtype=np.int64)
        self._comp = np.zeros(capacity, dtype=np.int64)
        self._gen = np.zeros(capacity, dtype=np.int64)
        self._max = np.zeros(capacity, dtype=np.int64)
        self._pref = np.zeros(capacity, dtype=np.int64)

    _COLUMNS = ("_idx", "_comp", "_gen", "_max", "_pref")

    def append(self, sr) -> None:
        """``sr`` (an ``SGReq`` with its progress up to date) joins the batch."""
        n = self.n
        if n == self._idx.size:
            for name in self._COLUMNS:
                old = getattr(self, name)
                new = np.zeros(2 * old.size, dtype=np.int64)
                new[:n] = old[:n]
                setattr(self, name, new)
        self._idx[n] = sr.req.index
        self._comp[n] = sr.computed
        self._gen[n] = sr.generated
        self._max[n] = sr.max_new
        self._pref[n] = sr.prefix
        self.reqs.append(sr)
        self.n = n + 1

    def clear(self) -> None:
        self.n = 0
        self.reqs.clear()

    # -- reads ----------------------------------------------------------------------------
    def indices(self) -> np.ndarray:
        """The running requests' indices (a view: valid until the batch changes)."""
        return self._idx[:self.n]

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Views of (computed, generated, max_new, prefix), for the rare paths that write them."""
        n = self.n
        return self._comp[:n], self._gen[:n], self._max[:n], self._pref[:n]

    def sync(self, page: int) -> None:
        """Write every running request's progress back into its ``SGReq``.

        ``alloc``: the private KV it holds between passes, ``ceil_page(computed) - prefix``.
        """
        for i, sr in enumerate(self.reqs):
            self._write_back(sr, i, page)

    def _write_back(self, sr, i: int, page: int) -> None:
        c = int(self._comp[i])
        sr.computed = c
        sr.generated = int(self._gen[i])
        sr.alloc = -(-c // page) * page - sr.prefix

    def reserve(self, clip: int) -> int:
        """Sum over the batch of the remaining output capped at ``clip`` (SGLang's admission reserve)."""
        n = self.n
        return int(np.minimum(self._max[:n] - self._gen[:n], clip).sum())

    def outstanding(self) -> int:
        """Remaining output tokens of the batch."""
        n = self.n
        return int(np.maximum(self._max[:n] - self._gen[:n], 0).sum())

    def left_min(self) -> int:
        """The fewest remaining output tokens of any running request (:data:`NO_LIMIT` if none)."""
        n = self.n
        return int((self._max[:n] - self._gen[:n]).min()) if n else NO_LIMIT

    def decode_need(self, page: int) -> int:
        """KV tokens the next decode pass allocates: a page for each request at a page boundary."""
        n = self.n
        if page == 1:
            return n
        return page * int(np.count_nonzero(self._comp[:n] % page == 0))

    def contexts(self) -> np.ndarray:
        """Each request's context in the next decode pass (computed + 1), a new array."""
        return self._comp[:self.n] + 1

    # -- writes ---------------------------------------------------------------------------
    def advance(self, k: int, page: int) -> int:
        """``k`` decode passes end: each request gains ``k`` tokens.

        Returns the KV tokens passes 2..k allocate (the first pass's were allocated when it
        was scheduled): each request grows from ``ceil_page(c + 1)`` to ``ceil_page(c + k)``.
        """
        n = self.n
        comp = self._comp[:n]
        if page == 1:
            extra = n * (k - 1)
        else:
            extra = page * int(((comp + (k - 1)) // page - comp // page).sum())
        comp += k
        self._gen[:n] += k
        return extra

    def remove_done(self, page: int) -> list:
        """Requests that reached ``max_new`` leave, their progress written back; returns them in order."""
        n = self.n
        done_mask = self._gen[:n] >= self._max[:n]
        positions = np.flatnonzero(done_mask).tolist()
        if not positions:
            return []
        reqs = self.reqs
        done = []
        for i in positions:
            self._write_back(reqs[i], i, page)
            done.append(reqs[i])
        keep = ~done_mask
        m = n - len(positions)
        for name in self._COLUMNS:
            arr = getattr(self, name)
            arr[:m] = arr[:n][keep]
        reqs[:] = [sr for sr, kept in zip(reqs, keep.tolist()) if kept]
        self.n = m
        return done


def new_running_batch() -> RunningBatch:
    """The compiled running batch when built (and not switched off), else the numpy one."""
    return _core.RunningBatch() if _core is not None else RunningBatch()


#: The compiled running batch's module, or None (bound at import: servesim/compiled.py's rule).
_core = compiled_module("engines._sglang_batch_core")
