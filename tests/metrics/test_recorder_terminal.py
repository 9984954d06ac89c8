"""A request reaches exactly one terminal state: a second one is an error, not an overwrite."""

from __future__ import annotations

import numpy as np
import pytest

from servesim.metrics.recorder import RequestRecorder, Status


def test_second_terminal_state_raises_and_keeps_the_first():
    rec = RequestRecorder()
    for i in range(3):
        rec.register(i, f"r{i}", None, 0, 10, 5, False)
    rec.finished(1, 2.5, Status.COMPLETED)
    rec.finished(2, 3.0, Status.REJECTED, "prompt too long")
    with pytest.raises(AssertionError, match="request r1 reached a second terminal state"):
        rec.finished(1, 4.0, Status.REJECTED, "late")
    assert rec.column("status").tolist() == [Status.PENDING, Status.COMPLETED, Status.REJECTED]
    assert np.array_equal(rec.column("finish"), [np.nan, 2.5, 3.0], equal_nan=True)
    assert rec.reason == ["", "", "prompt too long"]
    assert rec.close_unfinished(9.0, "time limit") == 1
    assert rec.column("status").tolist() == [Status.UNFINISHED, Status.COMPLETED, Status.REJECTED]
