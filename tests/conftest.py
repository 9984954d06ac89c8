"""Shared test helpers: locating ../shared/data and running small simulations."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def shared_file(*parts: str) -> Path:
    """A file under ../shared/data; the test is skipped when it is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path
