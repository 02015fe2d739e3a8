"""The in-process runner of the console script, a pytest plugin (registered in tests/conftest.py).

The one way the tests run `robust-train` in the test process (`tests.support.console` is the one
way in a process of its own): the fixture `cli`, whose `cli(*args, cwd=..., env=...)` runs
`robust_train.app.cli.main` (the console script's entry point) and returns what the command
printed and returned, without a subprocess's imports (the fast tier).
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Runner:
    """`cli(*args, cwd=None, env=None)` -> CompletedProcess of `robust-train *args` run IN this
    process: its exit code (argparse's SystemExit included), stdout and stderr (captured; what
    the test printed before is dropped)."""
    from robust_train.app.cli import main

    def run(*args: object, cwd: Path | str | None = None, env: dict[str, str] | None = None):
        with monkeypatch.context() as patch:
            if cwd is not None:
                patch.chdir(cwd)
            for key, value in (env or {}).items():
                patch.setenv(key, value)
            patch.delenv("ROBUST_TRAIN_DEBUG", raising=False)
            capsys.readouterr()
            with _lightning_lines_to_stderr():
                try:
                    code = main([str(a) for a in args])
                except SystemExit as stop:  # argparse's --help and its usage errors
                    code = stop.code if isinstance(stop.code, int) else 0
            out = capsys.readouterr()
        argv = ["robust-train", *map(str, args)]
        return subprocess.CompletedProcess(argv, code, out.out, out.err)

    return run


@contextmanager
def _lightning_lines_to_stderr() -> Iterator[None]:
    """Lightning's log lines reach the console script's stderr; in a test process its handler
    holds the stream of the moment it was imported, so they are echoed to the captured stderr
    (at INFO, as Lightning sets its loggers in a fresh process)."""
    echo = logging.StreamHandler(sys.stderr)
    loggers = [logging.getLogger(n) for n in ("pytorch_lightning", "lightning_fabric")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(echo)
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(echo)
            logger.setLevel(level)
