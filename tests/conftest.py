"""Shared test setup: one torch thread per process, W&B offline, seeds, and the plugins of
tests/support (the two ways to run the console script, the run's shared artifacts, the docs'
shell runs, the fast tier's in-process rule, the module order and the CPU report)."""

from __future__ import annotations

import logging
import os

import pytest
import torch

pytest_plugins = [
    "tests.support.artifacts",
    "tests.support.console",
    "tests.support.cpu_report",
    "tests.support.docs_blocks",
    "tests.support.in_process",
    "tests.support.schedule",
    "tests.support.tiers",
]

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
# Small tensors: one thread is fastest, and keeps parallel test runs from oversubscribing the cores.
torch.set_num_threads(1)

_LIGHTNING_LOGGERS = (
    "pytorch_lightning",
    "pytorch_lightning.utilities.rank_zero",
    "lightning.pytorch",
    "lightning_fabric",
)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _restore_determinism():
    """A fit with `trainer.deterministic: true` in this process turns deterministic algorithms on
    for the whole process (Lightning never turns them off); later tests must not inherit that
    (Captum's DeepLift reference uses max_unpool2d, which has no deterministic kernel)."""
    before = _determinism()
    yield
    if _determinism() != before:  # the call imports torch._inductor: only when it changed
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def _determinism() -> tuple[bool, bool]:
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )


@pytest.fixture(autouse=True)
def _lightning_log_levels_restored():
    """Each test starts with Lightning's loggers at INFO at most (Lightning's own level): the
    benchmarks' quiet helpers set them to ERROR in the process that calls them (some at import
    or in module fixtures), which would hide Lightning's info lines, the console script's
    messages among them, from the tests after them. The levels are restored after the test."""
    saved = [(logging.getLogger(n), logging.getLogger(n).level) for n in _LIGHTNING_LOGGERS]
    for logger, level in saved:
        if level > logging.INFO:
            logger.setLevel(logging.INFO)
    yield
    for logger, level in saved:
        logger.setLevel(level)
