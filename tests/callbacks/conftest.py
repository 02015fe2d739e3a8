"""Fixtures of the callback tests (settings and the datamodule are in monitor_helpers.py)."""

from __future__ import annotations

import copy

import pytest
import torch

from robust_train import RobustClassifier
from tests.support.helpers import TinyCNN
from tests.support.monitor_helpers import DigitsData


@pytest.fixture
def data() -> DigitsData:
    return DigitsData()


@pytest.fixture
def module(trained_digits) -> RobustClassifier:
    """A RobustClassifier around a copy of the session's trained TinyCNN (most images correct)."""
    return RobustClassifier(copy.deepcopy(trained_digits[0]).train())


@pytest.fixture
def bn_module() -> RobustClassifier:
    """An untrained module with BatchNorm and Dropout (train and eval differ)."""
    torch.manual_seed(0)
    return RobustClassifier(TinyCNN(batchnorm=True, dropout=0.1))
