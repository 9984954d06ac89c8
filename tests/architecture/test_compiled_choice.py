"""Every compiled/pure-Python twin is chosen the same way, at the same moment.

The rule (servesim/compiled.py): ``SERVESIM_PURE_PYTHON`` is read once, when
``servesim.compiled`` is imported; each module that uses a compiled core binds it at its own
import, as the module global ``_core = compiled_module("<core>")``, and reads only that
global afterwards.  Checked two ways: in the source (where ``compiled_module`` is called, who
imports a core or reads the switch) and in fresh processes, compiled and pure Python, where
every user of each core must hold the same version, and that version must be the one the
modules compiled from source run as.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from servesim.compiled import CORES, FROM_SOURCE, PURE_PYTHON_ENV, compiled_module, runs_compiled

SRC = Path(__file__).resolve().parents[2] / "src" / "servesim"
#: The modules allowed to read the switch itself.
SWITCH_OWNERS = {"compiled.py"}


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts)


def core_bindings(source: str) -> tuple[list[str], list[str]]:
    """(cores bound by a top-level ``_core = compiled_module("<core>")``, any other use of
    ``compiled_module`` described for the failure message)."""
    tree = ast.parse(source)
    bound, stray = [], []
    top = {id(node.value) for node in tree.body if isinstance(node, ast.Assign)
           and [getattr(t, "id", None) for t in node.targets] == ["_core"]}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "compiled_module":
            arg = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
            if id(node) in top and arg in CORES:
                bound.append(arg)
            else:
                stray.append(f"line {node.lineno}: compiled_module({arg!r}) not as a top-level `_core = ...`")
    return bound, stray


def direct_core_imports(source: str) -> list[str]:
    """Imports of a core's module that bypass ``compiled_module`` (``from servesim.x import _core_mod``...)."""
    found = []
    cores = {f"servesim.{name}" for name in CORES}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            found += sorted(names & cores)
        elif isinstance(node, ast.Import):
            found += sorted({a.name for a in node.names} & cores)
    return found


#: The recorded choice, by the names servesim.compiled gives it.
SWITCH_NAMES = {"PURE_PYTHON", "pure_python_forced"}


def _names_switch(node: ast.AST) -> bool:
    return getattr(node, "id", None) == "PURE_PYTHON_ENV" or getattr(node, "value", None) == PURE_PYTHON_ENV


def reads_switch(source: str) -> bool:
    """Whether ``source`` consults the switch: the recorded choice, or the variable itself."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id in SWITCH_NAMES:
            return True
        if isinstance(node, (ast.Attribute, ast.alias)) and getattr(node, "attr", getattr(node, "name", None)) in \
                SWITCH_NAMES:
            return True
        if isinstance(node, ast.Call) and any(w in ast.unparse(node.func) for w in ("environ", "getenv")) \
                and any(_names_switch(a) for a in node.args):
            return True
    return False


def users() -> dict[str, list[str]]:
    """Each core and the modules that bind it."""
    out: dict[str, list[str]] = {name: [] for name in CORES}
    for path in sorted(SRC.rglob("*.py")):
        for name in core_bindings(path.read_text())[0]:
            out[name].append(_module_name(path))
    return out


def test_cores_are_bound_at_import_and_nowhere_else():
    problems = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in SWITCH_OWNERS:
            continue
        source = path.read_text()
        problems += [f"{rel}: {s}" for s in core_bindings(source)[1]]
        problems += [f"{rel}: imports {m} directly" for m in direct_core_imports(source)]
        if reads_switch(source):
            problems.append(f"{rel}: reads the switch itself")
    assert not problems, "\n".join(problems)
    assert all(users().values()), f"cores without a user: {[n for n, u in users().items() if not u]}"


def test_the_source_check_sees_a_late_choice():
    late = 'def build():\n    core = compiled_module("perf._stretch_core")\n'
    assert core_bindings(late)[1] and not core_bindings(late)[0]
    assert core_bindings('_core = compiled_module("perf._stretch_core")\n') == (["perf._stretch_core"], [])
    assert direct_core_imports("from servesim.perf import _stretch_core\n") == ["servesim.perf._stretch_core"]
    assert reads_switch("import os\nx = os.environ.get(PURE_PYTHON_ENV)\n")
    assert reads_switch(f"import os\nx = os.getenv('{PURE_PYTHON_ENV}')\n")
    assert reads_switch("from servesim.compiled import pure_python_forced\n")  # an alias
    assert not reads_switch("raise RuntimeError(f'not built or {PURE_PYTHON_ENV} is set')\n")


#: Imports each user in a fresh process and reports, per core, which version each user holds,
#: and whether the modules compiled from source run compiled.
_REPORT = """
import importlib, json, sys
from servesim.compiled import FROM_SOURCE, runs_compiled
users = json.loads(sys.argv[1])
held = {core: {user: getattr(importlib.import_module("servesim." + user), "_core") is not None for user in mods}
        for core, mods in users.items()}
print(json.dumps({"held": held, "from_source": sorted({runs_compiled(n) for n in FROM_SOURCE})}))
"""


def _report(pure: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != PURE_PYTHON_ENV}
    if pure:
        env[PURE_PYTHON_ENV] = "1"
    out = subprocess.run([sys.executable, "-c", _REPORT, json.dumps(users())], check=True, capture_output=True,
                         text=True, env=env).stdout
    return json.loads(out)


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure-python"])
def test_every_user_of_a_core_holds_the_same_version(pure: bool):
    report = _report(pure)
    built = not pure and all(compiled_module(n) is not None for n in CORES) \
        and all(runs_compiled(n) for n in FROM_SOURCE)
    if pure or built:  # one version everywhere: the cores' users and the modules from source
        for core, held in report["held"].items():
            assert set(held.values()) == {not pure}, (core, held)
        assert report["from_source"] == [not pure]
    else:  # a partial build: still one version per core
        for core, held in report["held"].items():
            assert len(set(held.values())) == 1, (core, held)
