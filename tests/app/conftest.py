"""Fixtures of the reliability tests; their helpers are in tests/support/reliability.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


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
