"""The optional compiled parts of servesim, and the switch that turns them all off.

Some hot paths have a Cython version next to the Python one (:data:`MODULES`;
docs/architecture.md says what each replaces), built when servesim is installed.  Each
gives exactly the Python version's results, faster; the Python versions stay as the
reference the tests compare against, and as the fallback where the extensions were not
built (no C compiler).

Other modules (:data:`FROM_SOURCE`) are compiled from their own ``.py``, typed by the
``.pxd`` beside it: there is no second version to keep equal, the extension simply shadows
the source on import.

One rule chooses for all of them.  ``SERVESIM_PURE_PYTHON=1`` is read once, when this
module is first imported (``servesim/__init__.py`` imports it before anything else), into
:data:`PURE_PYTHON`; nothing reads the variable again.  Set, it makes every part Python:
:func:`load_sources_if_forced` makes the :data:`FROM_SOURCE` imports read their ``.py``, and
:func:`compiled_module` answers None.  Every user of a :data:`CORES` module binds it at its own
import, as a module global ``_core = compiled_module(...)``, and reads that global when it
builds objects, so all users of a core run the same version as each other and as the
modules compiled from source (some of which type the cores' classes: the compiled
simulation's event queue, the compiled pool's block owner).  tests/architecture checks the
rule; the test harness's ``python_versions`` swaps those globals to build reference objects
in one process.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType

from servesim.compiled_parts import CORES, FROM_SOURCE

#: Set to 1 to run every compiled part in Python (identical results, slower).
PURE_PYTHON_ENV = "SERVESIM_PURE_PYTHON"

#: The compiled modules and the modules compiled from source (compiled_parts.py, which
#: setup.py reads too).
MODULES = CORES


def _environment_asks_for_python() -> bool:
    return os.environ.get(PURE_PYTHON_ENV, "0") not in ("", "0")


#: Whether every compiled part runs as Python: :data:`PURE_PYTHON_ENV`, read once, here.
PURE_PYTHON: bool = _environment_asks_for_python()


def pure_python_forced() -> bool:
    """Whether this process runs every part as Python (:data:`PURE_PYTHON`, fixed at import)."""
    return PURE_PYTHON


def compiled_module(name: str) -> ModuleType | None:
    """The compiled module ``servesim.<name>`` (one of :data:`CORES`), or None if it is not
    built or switched off.  Called once per user, at the user's import (see above)."""
    if PURE_PYTHON:
        return None
    try:
        return importlib.import_module(f"servesim.{name}")
    except ImportError:
        return None


def runs_compiled(name: str) -> bool:
    """Whether the imported module ``servesim.<name>`` (one of :data:`FROM_SOURCE`) is the extension."""
    path = getattr(importlib.import_module(f"servesim.{name}"), "__file__", None) or ""
    return path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Imports the :data:`FROM_SOURCE` modules from their ``.py`` even where the extension is built."""

    names = frozenset(f"servesim.{name}" for name in FROM_SOURCE)

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname not in self.names:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for folder in path or ():  # the package's folder(s)
            source = os.path.join(folder, leaf)
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def load_sources_if_forced() -> None:
    """With :data:`PURE_PYTHON_ENV` set, import the :data:`FROM_SOURCE` modules from source
    (``servesim/__init__.py`` calls this before any of them is imported)."""
    if PURE_PYTHON and not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())


def compiled_parts() -> dict[str, bool]:
    """Each compiled module and whether runs use it now (built and not switched off)."""
    parts = {name: compiled_module(name) is not None for name in MODULES}
    parts.update((name, runs_compiled(name)) for name in FROM_SOURCE)
    return parts


def describe() -> str:
    """One line saying which compiled parts a run uses, for benchmark output."""
    parts = compiled_parts()
    on = [name for name, used in parts.items() if used]
    if len(on) == len(parts):
        return f"compiled parts: all {len(parts)} in use"
    if PURE_PYTHON:
        return f"compiled parts: off ({PURE_PYTHON_ENV} is set)"
    off = [name for name, used in parts.items() if not used]
    return f"compiled parts: {len(on)} of {len(parts)} in use; not built: {', '.join(off)}"
