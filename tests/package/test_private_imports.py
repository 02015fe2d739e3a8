"""No module of robust_train/, benchmarks/ or experiments/ imports another package's underscore
module or name: what two packages share is public.

A package here is a top-level package of robust_train (robust_train.attacks, ...), or the
benchmarks or experiments package as a whole. Imports anywhere in a file count (module level or
inside a function), read from the source with `ast`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("robust_train", "benchmarks", "experiments")


def owner(dotted: list[str]) -> tuple[str, ...]:
    """The package a dotted module path belongs to."""
    return tuple(dotted[:2]) if dotted[0] == "robust_train" else tuple(dotted[:1])


def is_private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def foreign_private_imports(path: Path, module: list[str]) -> list[str]:
    """`file:line target` for each underscore module or name `path` (the module `module`)
    imports from another package of FOLDERS than its own."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            if parts[0] not in FOLDERS or owner(parts) == owner(module):
                continue
            if any(is_private(p) for p in parts[1:]):
                found.append(f"{path.name}:{node.lineno} {target}")
    return found


def test_the_finder_sees_modules_and_names_across_packages(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        "from robust_train.attacks import _loop\nfrom robust_train.attacks.fragility import "
        "_context, fragility_attack\nimport robust_train._private\n"
        "from experiments.leaderboard import _measures\nfrom benchmarks._tools import t\n"
        "from robust_train.explain.autograd import input_gradient\nfrom . import _near\n"
    )
    found = [f.split(" ")[1] for f in foreign_private_imports(source, ["experiments", "x"])]
    assert found == [
        "robust_train.attacks._loop",
        "robust_train.attacks.fragility._context",
        "robust_train._private",
        "benchmarks._tools.t",
    ]
    inside = foreign_private_imports(source, ["robust_train", "attacks", "x"])
    assert [f.split(" ")[1] for f in inside] == [
        "robust_train._private",
        "experiments.leaderboard._measures",
        "benchmarks._tools.t",
    ]


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_module_imports_another_packages_private_module(folder: str) -> None:
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        module = list(path.relative_to(ROOT).with_suffix("").parts)
        found += foreign_private_imports(path, module)
    assert found == [], "make what is shared public"
