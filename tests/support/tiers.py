"""The test tiers, a pytest plugin (registered in tests/conftest.py).

A test outside the slow tier (`make test-fast`, `-m "not slow"`) that starts a Python subprocess
fails, naming the fix: mark it `slow`, or run the command in-process (the `cli` fixture,
tests/support/in_process.py). A `heavy` test (`make test-heavy`; `make test` leaves it out) is
slow too: the mark implies `slow`, so `make test-fast` never selects it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PYTHON_BIN = Path(sys.executable).parent


def _starts_python(args: object) -> bool:
    """Whether a command line runs a Python process: this interpreter, or a console script
    beside it (robust-train, the benchmarks' modules)."""
    first = args if isinstance(args, (str, os.PathLike)) else next(iter(args), "")  # type: ignore[call-overload]
    program = Path(str(first).split()[0]) if str(first).strip() else Path()
    return program.name.startswith("python") or program.parent == PYTHON_BIN


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every `heavy` test is `slow` too (before `-m` selects: this hook runs first)."""
    for item in items:
        if item.get_closest_marker("heavy") is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _fast_tier_runs_in_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """A test outside the slow tier never starts a Python subprocess (the console script, a
    fresh interpreter, a benchmark module): each costs seconds of imports, so they belong to the
    full suite. Other programs (W&B's service, git) are not affected."""
    if request.node.get_closest_marker("slow") is not None:
        return
    real = subprocess.Popen.__init__

    def guarded(self, args, *rest, **kwargs):
        if _starts_python(args):
            raise AssertionError(
                f"{request.node.nodeid} starts a Python subprocess ({args!r:.120}) but is not "
                "marked @pytest.mark.slow: mark it slow, or run the command in-process (the "
                "`cli` fixture)"
            )
        real(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)
