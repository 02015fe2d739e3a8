"""Every code block of the documentation runs as written (mktestdocs): Python blocks in this
process, shell blocks with the package's console script on PATH, each page in a fresh folder."""

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
def test_shell_blocks_run(page: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    check_md_file(page, lang="bash")
