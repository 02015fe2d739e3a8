"""Fixtures `run_cli`: the real `robust-train` console script in a subprocess, and `warm_cli`: the
same command in a process of the warm console (tests/warm_console.py: a process of its own,
without the script's seconds of imports)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
SCRIPT = Path(sys.executable).parent / "robust-train"
TINY = [
    "--trainer.limit_train_batches=3",
    "--trainer.limit_val_batches=2",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]


def _env(env: dict[str, str] | None) -> dict[str, str]:
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_SILENT": "true", **(env or {})}
    full_env.pop("ROBUST_TRAIN_DEBUG", None)
    full_env.pop("WANDB_MODE", None)
    return full_env


def robust_train(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`robust-train *args` in `cwd` with one torch thread; stdout and stderr captured."""
    full_env = _env(env)
    command = [
        str(SCRIPT) if SCRIPT.is_file() else sys.executable,
        *([] if SCRIPT.is_file() else ["-m", "robust_train.app.cli"]),
        *args,
    ]
    return subprocess.run(
        command, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def run_cli():
    """`run_cli(*args, cwd=..., env=None)` -> CompletedProcess of `robust-train *args`."""
    return robust_train


def warm_robust_train(
    warm, *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`robust_train(*args, ...)` in a process of the warm console `warm` (the fixture
    `warm_console`)."""
    return warm.run([str(SCRIPT), *args], cwd=cwd, env=_env(env), timeout=timeout)


@pytest.fixture
def warm_cli(warm_console):
    """`warm_cli(*args, cwd=..., env=None)`: `run_cli` in a process of the warm console."""

    def run(
        *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        return warm_robust_train(warm_console, *args, cwd=cwd, env=env, timeout=timeout)

    return run
