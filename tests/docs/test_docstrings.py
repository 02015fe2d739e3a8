"""Library docstrings and comments state the contract, not the lab notebook.

No docstring or comment under `robust_train/` names a page of the benchmarks or experiments
(`benchmarks/...`, `experiments/...`, or a page such as `LEADERBOARD.md` by itself), a test file
(`tests/...`) or a date: figures and dated findings live on those pages, and the reasoning behind
a choice in docs/concepts/design-notes.md. The text is read with `ast` and `tokenize`, so nothing
is imported.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "robust_train"

# The pages whose names a docstring must not cite (read from the folders, so a new page counts).
PAGES = sorted(
    p.name for folder in ("benchmarks", "experiments") for p in (ROOT / folder).glob("*.md")
)
FORBIDDEN = {
    "a benchmark, experiment or test path": re.compile(
        r"(?<![\w.])(benchmarks|experiments|tests)/"
    ),
    "a benchmark or experiment page": re.compile(
        r"(?<![\w/])(" + "|".join(re.escape(p) for p in PAGES if p != "README.md") + r")\b"
    ),
    "a date": re.compile(r"\b(19|20)\d\d-(0[1-9]|1[0-2])(-[0-3]\d)?\b"),
}


def texts(source: str) -> list[tuple[int, str]]:
    """(line, text) of every docstring and comment in a module's source."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                found.append((node.body[0].lineno, doc))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
    return found


def offences(source: str) -> list[str]:
    """'line N: what (the match)' for every forbidden reference in `source`."""
    return [
        f"line {line}: {what} ({match.group(0)!r})"
        for line, text in texts(source)
        for what, pattern in FORBIDDEN.items()
        for match in pattern.finditer(text)
    ]


@pytest.mark.parametrize(
    "source",
    [
        '"""Measured in benchmarks/RESULTS.md."""\n',
        'def f():\n    """Tolerances: tests/explain/test_grad_cam.py."""\n',
        "x = 1  # see experiments/leaderboard.py\n",
        'class A:\n    """Found on 2026-12-03 (section 5)."""\n',
        '"""The leaderboard page (LEADERBOARD.md) has the figures."""\n',
    ],
)
def test_the_check_sees_page_paths_and_dates(source: str) -> None:
    """The detector is not blind: each kind of reference in a docstring or comment is caught."""
    if "LEADERBOARD.md" in source and "LEADERBOARD.md" not in PAGES:
        pytest.skip("no LEADERBOARD.md page to cite")
    assert offences(source)


def test_the_check_leaves_the_contract_alone() -> None:
    """Papers' years, output files and library paths are not page references."""
    source = (
        '"""Ghorbani et al. (AAAI 2019); writes results.json and summary.md; see\n'
        'robust_train/explain/_rescale.py and the contributing guide (CONTRIBUTING.md)."""\n'
        "x = 0.95  # a 95% interval\n"
    )
    assert offences(source) == []


def test_library_docstrings_cite_no_pages_tests_or_dates() -> None:
    """Every module of the library: figures and findings belong on the experiment pages and
    the reasoning in the design notes, so a docstring never points at them."""
    found = {
        str(path.relative_to(ROOT)): bad
        for path in sorted(PACKAGE.rglob("*.py"))
        if (bad := offences(path.read_text(encoding="utf-8")))
    }
    assert not found, (
        "library docstrings or comments cite a page, a test or a date; state the contract and "
        "move the reasoning to docs/concepts/design-notes.md:\n"
        + "\n".join(f"{path}: {line}" for path, lines in found.items() for line in lines)
    )
