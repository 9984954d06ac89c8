"""The optional compiled parts of servesim, and the switch that turns them all off.

Some hot paths have a Cython version next to the Python one (:data:`MODULES`;
docs/architecture.md says what each replaces), built when servesim is installed.  Each
gives exactly the Python version's results, faster; the Python versions stay as the
reference the tests compare against, and as the fallback where the extensions were not
built (no C compiler).  Setting ``SERVESIM_PURE_PYTHON=1`` makes every part use its Python
version: it is read when a block pool, recorder or step-time model is built, and for the
functions bound at import (the segment arithmetic, ``sequence_units``) when
``servesim.kvcache.segments`` and ``servesim.workload.request`` are imported.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

#: Set to 1 to run every compiled part in Python (identical results, slower).
PURE_PYTHON_ENV = "SERVESIM_PURE_PYTHON"

#: The compiled modules (setup.py builds the same list).
MODULES = ("engines._decode_core", "engines._sglang_batch_core", "kvcache._lru_core",
           "kvcache._segments_core", "metrics._emit_core", "perf._stretch_core", "workload._units_core")


def pure_python_forced() -> bool:
    """Whether :data:`PURE_PYTHON_ENV` asks for the Python versions (read at each call)."""
    return os.environ.get(PURE_PYTHON_ENV, "0") not in ("", "0")


def compiled_module(name: str) -> ModuleType | None:
    """The compiled module ``servesim.<name>``, or None if it is not built or switched off."""
    if pure_python_forced():
        return None
    try:
        return importlib.import_module(f"servesim.{name}")
    except ImportError:
        return None


def compiled_parts() -> dict[str, bool]:
    """Each compiled module and whether runs use it now (built and not switched off)."""
    return {name: compiled_module(name) is not None for name in MODULES}


def describe() -> str:
    """One line saying which compiled parts a run uses, for benchmark output."""
    parts = compiled_parts()
    on = [name for name, used in parts.items() if used]
    if len(on) == len(parts):
        return f"compiled parts: all {len(parts)} in use"
    if pure_python_forced():
        return f"compiled parts: off ({PURE_PYTHON_ENV} is set)"
    off = [name for name, used in parts.items() if not used]
    return f"compiled parts: {len(on)} of {len(parts)} in use; not built: {', '.join(off)}"
