"""servesim's packages form layers: a package imports only from lower layers, and no import
circle exists between modules (docs/architecture.md draws the layers).

The test reads every module's imports from its source (``import servesim.x`` and
``from servesim.x import ...``, at module level or inside functions: a lazy import is still a
dependency), leaving out those under ``if TYPE_CHECKING:``, which only annotate.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "servesim"

#: Layer of each top-level package or module of servesim, lowest first.  A package may
#: import from its own layer's modules only when they are in the same package.  A package
#: not listed here is an application (the top layer): it may import anything, and nothing
#: listed may import it.
LAYERS: dict[str, int] = {
    "compiled_parts": -1,  # plain data, read by setup.py too
    "errors": 0, "compiled": 0, "yaml_io": 0, "_version": 0, "gc_threshold": 0, "input_paths": 0,
    "workload": 1, "models": 1, "hardware": 1,
    "kvcache": 2, "metrics": 2, "perf": 2,
    "engines": 3,
    "config": 4,
    "cluster": 5,
    "sim": 6,
    "report": 7,
    "api": 8,
    "validate": 9, "serve": 9, "plan": 9, "catalog": 9,
    "cli": 10,
    # Modules placed apart from their package's layer (the longest listed prefix wins): the
    # event queue knows nothing about LLMs (disaggregation posts its events); the planning
    # metrics every run reports, and the sections of the config schema that planning owns,
    # sit below the config and api that use them, while the sweep drivers sit above api.
    "sim.events": 1, "report.arrow": 1,  # report.arrow: pyarrow array helpers, no servesim imports
    "plan.spec": 3, "plan.slo": 3, "plan.cost": 3, "plan.fleet": 3, "plan.energy": 3, "plan.overload": 3,
    "plan.summary": 7,
}
TOP = 100


def _module_name(path: Path) -> str:
    parts = ("servesim",) + path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(path: Path) -> list[tuple[str, int]]:
    """The servesim modules ``path`` imports (outside TYPE_CHECKING), with line numbers."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = _type_checking_lines(tree)
    out = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            out.extend((a.name, node.lineno) for a in node.names if a.name.startswith("servesim"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("servesim"):
            # ``from servesim.pkg import mod`` imports the submodule when it is one
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                target = SRC.joinpath(*sub.split(".")[1:])
                is_module = (target.with_suffix(".py").is_file() or target.with_suffix(".pyx").is_file()
                             or (target / "__init__.py").is_file())
                out.append((sub if is_module else node.module, node.lineno))
    return out


def _graph() -> dict[str, list[tuple[str, int]]]:
    return {_module_name(p): _imports(p) for p in sorted(SRC.rglob("*.py"))}


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return -1  # the package root itself: exempt
    for k in range(len(parts), 1, -1):  # the longest listed prefix
        key = ".".join(parts[1:k])
        if key in LAYERS:
            return LAYERS[key]
    return TOP


def test_no_import_from_a_lower_layer_to_a_higher_one():
    bad = []
    for module, imports in _graph().items():
        if module == "servesim":
            continue  # the package's __init__ re-exports the public API lazily
        here = _layer(module)
        for target, line in imports:
            if target == "servesim" or target.split(".")[1] == module.split(".")[1]:
                continue  # the root package (yaml_io and friends) or the module's own package
            there = _layer(target)
            if there >= here:
                bad.append(f"{module}:{line} imports {target} (layer {there} >= {here})")
    assert not bad, "imports that go up or sideways:\n" + "\n".join(bad)


def test_no_import_circle_between_modules():
    # The root package's __init__ re-exports the public API lazily (api, config): left out.
    graph = {m: sorted({t for t, _ in imps if t not in (m, "servesim")})
             for m, imps in _graph().items() if m != "servesim"}
    state: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in graph.get(m, ()):
            if t not in graph:
                continue
            if state.get(t) == 1:
                circles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in graph:
        if m not in state and m != "servesim":
            visit(m)
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_the_layer_check_sees_imports():
    """The walk finds real imports (a guard against a check that passes vacuously)."""
    graph = _graph()
    assert ("servesim.engines.blockkv.manager", 10) not in graph["servesim.engines.vllm.fast_path"]
    assert any(t == "servesim.engines.blockkv.manager" for t, _ in graph["servesim.engines.vllm.fast_path"])
    assert any(t.startswith("servesim.cluster") for t, _ in graph["servesim.sim.simulation"])
