"""Every code block of the documentation runs as written (mktestdocs): Python blocks in this
process, shell blocks in bash (`-e -u`, a failing command fails the block) with `robust-train` on
PATH, each page in a fresh folder. In the shell blocks `robust-train` is the warm console script
(tests/support/warm_console.py): each command a process of its own with the block's stdin, stdout,
stderr, folder and environment, without the console script's seconds of imports each time; the
console script itself is run by the tests of tests/cli and tests/package/test_wheel.py. A page's
shell run is shared (tests/support/docs_blocks.py): tests/app/test_demo.py reads what the
getting-started page's `robust-train demo --quick` wrote rather than running the demo again."""

from __future__ import annotations

from pathlib import Path

import pytest
from mktestdocs import check_md_file

from tests.support.docs_blocks import DOCS, shell_blocks

PAGES = sorted(DOCS.rglob("*.md"))
# The getting-started page first: tests/app/test_demo.py reads its run (whichever comes first
# runs it, the other waits), and its demo is the longest block.
FIRST = DOCS / "getting-started.md"
SHELL_PAGES = sorted((p for p in PAGES if shell_blocks(p)), key=lambda p: (p != FIRST, p))


def _ids(path: Path) -> str:
    return path.relative_to(DOCS).as_posix()


def test_the_docs_have_pages() -> None:
    assert len(PAGES) >= 12
    assert FIRST in SHELL_PAGES and len(SHELL_PAGES) >= 6


@pytest.mark.slow
@pytest.mark.parametrize("page", SHELL_PAGES, ids=_ids)
def test_shell_blocks_run(page: Path, docs_shell_run) -> None:
    run = docs_shell_run(_ids(page))
    assert run.failure() is None, run.failure()
    assert len(run.blocks) == len(shell_blocks(page))


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_python_blocks_run(page: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    check_md_file(page, memory=True)
