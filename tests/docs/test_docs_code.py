"""Every code block of the documentation runs as written (mktestdocs): Python blocks in this
process, shell blocks in bash (`-e -u`, a failing command fails the block) with `robust-train` on
PATH, each page in a fresh folder. In the shell blocks `robust-train` is the warm console script
(tests/support/warm_console.py): each command a process of its own with the block's stdin, stdout,
stderr, folder and environment, without the console script's seconds of imports each time; the
console script itself is run by the tests of tests/cli and tests/package/test_wheel.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from mktestdocs import check_md_file

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").rglob("*.md"))


def _ids(path: Path) -> str:
    return path.relative_to(ROOT / "docs").as_posix()


def test_the_docs_have_pages() -> None:
    assert len(PAGES) >= 12


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_python_blocks_run(page: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    check_md_file(page, memory=True)


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=_ids)
def test_shell_blocks_run(page: Path, tmp_path: Path, monkeypatch, console) -> None:
    shim = console.shim(tmp_path / ".bin").parent
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    path = os.pathsep.join([str(shim), str(Path(sys.executable).parent), os.environ["PATH"]])
    monkeypatch.setenv("PATH", path)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    check_md_file(page, lang="bash")
