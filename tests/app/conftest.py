"""Fixtures of the reliability tests; their helpers are in `reliability.py` (this folder is put on
sys.path so the test modules import it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch) -> Path:
    """A working folder of its own, with sys.path and sys.modules restored afterwards (commands
    may import a user's module)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield work
    for name in set(sys.modules) - before:
        if name.startswith("evilmod_"):
            del sys.modules[name]
