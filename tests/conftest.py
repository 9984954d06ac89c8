"""Shared test helpers: locating ../shared/data and running small simulations."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

# Hypothesis runs derandomized: a CI run is reproducible (a failing example is the same on every run).
settings.register_profile("servesim", derandomize=True)
settings.load_profile("servesim")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def shared_file(*parts: str) -> Path:
    """A file under ../shared/data; the test is skipped when it is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path
