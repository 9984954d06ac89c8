"""No class in src/ forwards unknown attributes to another object through ``__getattr__``.

A forwarding wrapper hides what its callers need: a reader cannot see which attributes the
wrapper promises, and a class-level lookup (``getattr(type(model), ...)``, which the worker
uses for the optional step-time methods) silently skips it.  Wrappers spell out their methods
instead.  A module-level ``__getattr__`` (lazy imports in a package's ``__init__.py``) is not a
class and stays allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "servesim"
#: Attribute hooks that forward lookups (``__getattribute__`` would do the same, worse).
HOOKS = {"__getattr__", "__getattribute__"}


def forwarding_classes(source: str) -> list[str]:
    """``Class.hook`` for every class in ``source`` that defines one of :data:`HOOKS`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            found += [f"{node.name}.{item.name}" for item in node.body
                      if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in HOOKS]
    return found


def test_no_class_forwards_through_getattr():
    offenders = [f"{path.relative_to(SRC).as_posix()}: {hook}"
                 for path in sorted(SRC.rglob("*.py")) for hook in forwarding_classes(path.read_text())]
    assert not offenders, "classes forwarding attributes (spell out the methods instead):\n" + "\n".join(offenders)


def test_the_check_sees_a_forwarding_class_and_allows_a_module_hook():
    wrapper = "class W:\n    def __getattr__(self, name):\n        return getattr(self.inner, name)\n"
    module_hook = "def __getattr__(name):\n    raise AttributeError(name)\n"
    assert forwarding_classes(wrapper) == ["W.__getattr__"]
    assert forwarding_classes(module_hook) == []
