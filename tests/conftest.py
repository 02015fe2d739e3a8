from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
# Small tensors: one thread is fastest, and keeps parallel test runs from oversubscribing the cores.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _restore_determinism():
    """A fit with `trainer.deterministic: true` in this process turns deterministic algorithms on
    for the whole process (Lightning never turns them off); later tests must not inherit that
    (Captum's DeepLift reference uses max_unpool2d, which has no deterministic kernel)."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


@pytest.fixture(scope="session")
def trained_digits():
    """(model, x_test, y_test): a TinyCNN trained a few seconds on digits, shared by the session."""
    from helpers import train_digits_cnn

    return train_digits_cnn()
