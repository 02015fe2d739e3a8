"""The package's import graph: no cycle, and lower layers never import higher ones.

The graph is read from the source with `ast` (every `import`, at module level or inside a
function), so a lazy import cannot hide a cycle or an upward dependency. A fresh interpreter then
imports every module, lowest layer first, to check that each one imports on its own. The
benchmarks and experiments packages are held to the same graph rules (no cycle; experiments may
use the benchmarks' tools, never the reverse), import their scripts by package name rather than
through `sys.path`, and all three keep every function body within 60 lines.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "robust_train"
BENCHMARKS = PACKAGE.parent / "benchmarks"
EXPERIMENTS = PACKAGE.parent / "experiments"
MAX_BODY_LINES = 60

# Layers, lowest first: a module may import its own layer's modules and any lower layer's. Every
# top-level module or package of robust_train is placed here (a test checks it), so a new one is
# placed deliberately.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),
    ("models", "data"),
    ("explain",),
    ("attacks", "regularizers"),
    ("metrics", "certify"),
    ("evaluation", "callbacks", "training"),
    ("app", "lightning"),
)
APPLICATION = len(LAYERS) - 1


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A source file's syntax tree, parsed once per test process (the tests only read it)."""
    return ast.parse(path.read_text())


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts).removesuffix(".__init__")] = path
    return found


def imports(path: Path, known: dict[str, Path], root: str = "robust_train") -> set[str]:
    """`root` modules that `path` imports anywhere: `from a import b` needs a.b when it is
    a module, and the package a itself unless every imported name is one of its modules."""
    out: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] == root:
                named = {f"{node.module}.{a.name}" for a in node.names}
                out |= named & set(known)
                if not named <= set(known):
                    out.add(node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == root}
    return out


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> modules it imports, with the packages whose `__init__` an import runs (importing
    a.b.c runs a and a.b), except the importer's own enclosing packages."""
    known = modules(package)
    edges = {}
    for name, path in known.items():
        targets = set()
        for target in imports(path, known, package.name):
            parts = target.split(".")
            ancestors = {".".join(parts[:i]) for i in range(2, len(parts) + 1)}
            targets |= {a for a in ancestors if not name.startswith(a + ".")}
        edges[name] = targets - {name}
    return edges


def layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return APPLICATION + 1  # the package's __init__ sits above everything
    for index, names in enumerate(LAYERS):
        if parts[1] in names:
            return index
    return APPLICATION


def test_every_top_level_module_has_a_layer() -> None:
    placed = {name for names in LAYERS for name in names}
    top = {name.split(".")[1] for name in modules() if name.count(".")}
    assert top - placed == set(), (
        "place these modules in LAYERS (tests/package/test_architecture.py)"
    )


def test_the_top_level_holds_at_most_eight_modules() -> None:
    """The package's folders are its layers; the top level keeps only the public entry points."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 8, f"move these into a layer's folder: {top}"


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_module_import_graph_has_no_cycle() -> None:
    edges = graph()
    # a package's __init__ may import its own submodules; a submodule importing its package's
    # __init__ back would close a cycle and is kept in the graph
    cycle = find_cycle(edges)
    assert cycle is None, " -> ".join(cycle or [])


def test_top_level_package_graph_has_no_cycle() -> None:
    top: dict[str, set[str]] = defaultdict(set)
    for source, targets in graph().items():
        for target in targets:
            a, b = source.split(".")[:2], target.split(".")[:2]
            if a != b and len(a) == len(b) == 2:
                top[a[1]].add(b[1])
    cycle = find_cycle(top)
    assert cycle is None, " -> ".join(cycle or [])


def test_lower_layers_never_import_higher_ones() -> None:
    upward = sorted(
        f"{source} -> {target}"
        for source, targets in graph().items()
        for target in targets
        if layer(target) > layer(source)
    )
    assert upward == []


@pytest.mark.slow
def test_every_module_imports_alone_in_a_fresh_interpreter() -> None:
    """Each module first, alone (the package's modules are dropped from sys.modules between).
    Each source file is compiled once and its code object reused by every re-import (without
    bytecode files, PYTHONDONTWRITEBYTECODE, each import would compile it again): the modules
    still run anew each time."""
    names = [n for n in sorted(modules(), key=layer) if not n.endswith("__main__")]
    code = (
        "import importlib, importlib._bootstrap_external as external, sys\n"
        "compiled, compile_source = {}, external.SourceLoader.source_to_code\n"
        "def source_to_code(self, data, path, *, _optimize=-1):\n"
        "    if (path, data) not in compiled:\n"
        "        compiled[path, data] = compile_source(self, data, path, _optimize=_optimize)\n"
        "    return compiled[path, data]\n"
        "external.SourceLoader.source_to_code = source_to_code\n"
        f"for name in {names!r}:\n"
        "    for loaded in [m for m in sys.modules if m.startswith('robust_train')]:\n"
        "        del sys.modules[loaded]\n"
        "    importlib.import_module(name)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)


def test_script_packages_import_graphs_have_no_cycle() -> None:
    for folder, importer, imported in (
        (BENCHMARKS, "benchmarks.bench_eval", "benchmarks.eval_peers"),
        (EXPERIMENTS, "experiments.leaderboard", "experiments.leaderboard_report"),
    ):
        edges = graph(folder)
        assert imported in edges[importer]  # the graph sees them
        cycle = find_cycle(edges)
        assert cycle is None, " -> ".join(cycle or [])


def test_benchmarks_never_import_the_experiments() -> None:
    known = modules(EXPERIMENTS)
    found = {n: imports(p, known, "experiments") for n, p in modules(BENCHMARKS).items()}
    assert {n: i for n, i in found.items() if i} == {}
    assert imports(EXPERIMENTS / "registry.py", modules(BENCHMARKS), "benchmarks")  # it sees them


@pytest.mark.parametrize("folder", [BENCHMARKS, EXPERIMENTS], ids=lambda f: f.name)
def test_scripts_import_each_other_as_a_package_without_editing_sys_path(folder: Path) -> None:
    edits = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Attribute) and node.attr == "path":
                if isinstance(node.value, ast.Name) and node.value.id == "sys":
                    edits.append(f"{path.name}:{node.lineno}")
    assert edits == [], f"run the scripts as `python -m {folder.name} run NAME` instead"


def body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function's body, its docstring excluded."""
    body = node.body
    first = body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        if isinstance(first.value.value, str):
            body = body[1:]
    if not body:
        return 0
    return (body[-1].end_lineno or body[-1].lineno) - body[0].lineno + 1


def long_functions(folder: Path, limit: int = MAX_BODY_LINES) -> list[str]:
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(parsed(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if (n := body_lines(node)) > limit:
                    found.append(f"{path.relative_to(folder.parent)}:{node.lineno} {node.name} {n}")
    return found


def test_body_lines_excludes_the_docstring() -> None:
    (fn,) = ast.parse('def f():\n    """doc\n    more"""\n    a = 1\n    return a\n').body
    assert isinstance(fn, ast.FunctionDef) and body_lines(fn) == 2


@pytest.mark.parametrize("folder", [PACKAGE, BENCHMARKS, EXPERIMENTS], ids=lambda f: f.name)
def test_no_function_body_is_over_60_lines(folder: Path) -> None:
    assert long_functions(folder) == [], "split them into small named helpers"


def private_imports(path: Path, package: str) -> list[str]:
    """The underscore names (modules, or names in a module) that `path` imports from another
    top-level package of robust_train than its own `package`."""
    found = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            if parts[0] != "robust_train" or len(parts) < 3 or parts[1] == package:
                continue
            if any(p.startswith("_") and not p.startswith("__") for p in parts[1:]):
                found.append(f"{path.name}:{node.lineno} {target}")
    return found


def test_private_import_finder_sees_modules_and_names(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        "from robust_train.explain._clamp import a\nfrom robust_train.explain import grad_cam\n"
        "from robust_train.explain.grad_cam import _one\nimport robust_train.data._base\n"
        "from robust_train.regularizers._inner import b\n"
    )
    assert [f.split(" ")[1] for f in private_imports(source, "explain")] == [
        "robust_train.data._base",
        "robust_train.regularizers._inner.b",
    ]
    assert [f.split(" ")[1] for f in private_imports(source, "app")] == [
        "robust_train.explain._clamp.a",
        "robust_train.explain.grad_cam._one",
        "robust_train.data._base",
        "robust_train.regularizers._inner.b",
    ]


def test_no_module_imports_another_packages_private_module() -> None:
    """What two packages share is public: an underscore module (or name) is its package's own."""
    found = []
    for name, path in modules().items():
        parts = name.split(".")
        found += private_imports(path, parts[1] if len(parts) > 1 else "")
    assert found == [], "make what is shared public"
