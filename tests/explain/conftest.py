"""Fixtures for the explainer tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models: one intra-op thread. On a loaded 2-core machine, two OpenMP threads made the
    300-step meaningful perturbation loop 70x slower (43 s instead of 0.6 s); restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def trained_digits():
    """The shared trained digits model (same function and seed as tests/conftest.py), trained
    here with one thread: with two threads on a loaded 2-core machine training took 80 s."""
    from helpers import train_digits_cnn

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train_digits_cnn()
    finally:
        torch.set_num_threads(threads)
