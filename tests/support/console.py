"""The console script's runner, a pytest plugin (registered in tests/conftest.py): `robust-train`
as a user runs it, each command a process of its own.

This is the one way the tests run the console script in a process (`tests.support.in_process`
is the one way in-process). By default a command runs in a process of the warm console
(`tests.support.warm_console`: forked from an interpreter that imported the package's commands
once, started by the first test of the run that asks and shared by the pytest-xdist workers), so
it does not pay the script's seconds of imports; `fresh=True` runs the script itself in a new
interpreter, for what only that exercises (its start-up, a spawned rank, its stdin).

Fixtures:

- `console`: the `Console` of the run, for tests marked `slow` (it starts processes);
- `shared_console`: the same object for module- and session-scoped fixtures (no marker check).

Every command gets one torch thread, `WANDB_SILENT`, neither `ROBUST_TRAIN_DEBUG` nor
`WANDB_MODE` (W&B at its default, as a user's shell has it), then the caller's `env` on top.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.warm_console import WarmConsole, WarmProcess

SCRIPT = Path(sys.executable).parent / "robust-train"


def console_argv(*args: str) -> list[str]:
    """The command line of `robust-train *args` (the script beside this interpreter, else
    `python -m robust_train.app.cli`)."""
    if SCRIPT.is_file():
        return [str(SCRIPT), *map(str, args)]
    return [sys.executable, "-m", "robust_train.app.cli", *map(str, args)]


def console_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A command's environment: this one, one torch thread, W&B silent and at its default mode,
    no debug tracebacks; `extra` on top."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_SILENT": "true"}
    for name in ("ROBUST_TRAIN_DEBUG", "WANDB_MODE"):
        env.pop(name, None)
    return {**env, **(extra or {})}


class Console:
    """`robust-train` commands in processes of their own: `console(*args, cwd=...)` runs one to
    its end, `console.start(...)` starts one, `console.shim(folder)` puts a stand-in for the
    script on a PATH."""

    def __init__(self, folder: Path, run_pid: int) -> None:
        self._folder, self._run_pid = folder, run_pid
        self._warm: WarmConsole | None = None

    @property
    def warm(self) -> WarmConsole:
        """The run's warm console server (started on first use)."""
        if self._warm is None:
            self._warm = WarmConsole.shared(self._folder, run_pid=self._run_pid)
        return self._warm

    def __call__(
        self,
        *args: str,
        cwd: Path | str,
        env: dict[str, str] | None = None,
        timeout: float = 300,
        fresh: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """`robust-train *args` in `cwd`, to its end: its exit code, stdout and stderr (text)."""
        if not fresh:
            argv, full_env = console_argv(*args), console_env(env)
            return self.warm.run(argv, cwd=cwd, env=full_env, timeout=timeout)
        return subprocess.run(
            console_argv(*args), cwd=cwd, env=console_env(env), capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip

    def start(
        self,
        *args: str,
        cwd: Path | str,
        env: dict[str, str] | None = None,
        fresh: bool = False,
        **popen: Any,
    ) -> WarmProcess | subprocess.Popen[str]:
        """`robust-train *args` started in `cwd`: a process with Popen's interface (pid, poll,
        wait, send_signal, kill, communicate; stdout and stderr captured as text). `popen`
        (with `fresh=True` only) goes to `subprocess.Popen`, e.g. `start_new_session=True`."""
        if not fresh:
            if popen:
                raise TypeError(f"Popen options {sorted(popen)} need fresh=True")
            return self.warm.start(console_argv(*args), cwd=cwd, env=console_env(env))
        options: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE} | popen
        return subprocess.Popen(
            console_argv(*args), cwd=cwd, env=console_env(env), text=True, **options
        )

    def shim(self, folder: Path) -> Path:
        """`folder/robust-train`, a stand-in for the script that runs each command in the warm
        console with its own stdin, stdout, stderr, folder and environment (for shell scripts)."""
        return self.warm.shim(folder)


@pytest.fixture(scope="session")
def shared_console(tmp_path_factory: pytest.TempPathFactory) -> Console:
    """The run's `Console`, shared by the pytest-xdist workers (one warm server per run)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return Console(root.parent, run_pid=os.getppid())  # pytest's main process
    return Console(root, run_pid=os.getpid())


@pytest.fixture
def console(request: pytest.FixtureRequest, shared_console: Console) -> Console:
    """The run's `Console`; only for tests marked `slow` (the fast tier runs in-process, with
    the `cli` fixture)."""
    if request.node.get_closest_marker("slow") is None:
        raise AssertionError(f"{request.node.nodeid} runs the console script but is not slow")
    return shared_console
