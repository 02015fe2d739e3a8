"""One thread policy for every command (robust_train.core.runtime.set_threads): one torch thread
for models under a million parameters unless a number is given."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.core.runtime import SMALL_MODEL_PARAMETERS, set_threads


@pytest.fixture(autouse=True)
def _restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _large() -> nn.Module:
    model = nn.Linear(1000, 1000)  # 1,001,000 parameters
    assert sum(p.numel() for p in model.parameters()) >= SMALL_MODEL_PARAMETERS
    return model


def test_small_models_get_one_thread():
    torch.set_num_threads(2)
    assert set_threads([nn.Linear(4, 2), nn.Conv2d(1, 3, 3)]) == 1 == torch.get_num_threads()


def test_a_large_model_leaves_the_setting_alone():
    torch.set_num_threads(2)
    assert set_threads(_large()) == 2
    assert set_threads([nn.Linear(4, 2), _large()]) == 2  # one large model is enough


def test_a_given_number_wins():
    assert set_threads(_large(), threads=1) == 1
    assert set_threads(nn.Linear(4, 2), threads=2) == 2


@pytest.mark.parametrize("threads", [0, -1, 1.5])
def test_a_bad_number_is_refused(threads):
    with pytest.raises((ValueError, TypeError), match="threads"):
        set_threads(nn.Linear(4, 2), threads=threads)
