"""What DeepLIFT's docstring says of Captum: where hooked modules follow each other (a MaxPool2d
feeding a ReLU module, a ReLU module after a ReLU module) Captum loses a rule and its
completeness, while ours stays complete (experiments/deeplift_captum.py measures the sizes)."""

from __future__ import annotations

import pytest
import torch

from experiments.deeplift_captum import LAYOUTS, compare


@pytest.mark.parametrize("layout", ["MaxPool2d -> ReLU", "ReLU -> ReLU", "ReLU -> MaxPool2d"])
def test_captum_loses_completeness_where_hooked_modules_follow_each_other(layout) -> None:
    torch.manual_seed(0)
    model = LAYOUTS[layout]().eval()
    x = torch.rand(4, 1, 16, 16)
    found = compare(model, x, torch.rand(4, 1, 16, 16))
    assert found["ours_gap"] < 1e-5  # ours: the attributions sum to the logit gap
    assert found["captum_gap_relative"] > 0.05 and found["relative_difference"] > 0.1, found


def test_captum_agrees_where_its_rules_apply() -> None:
    torch.manual_seed(0)
    model = LAYOUTS["conv, MaxPool2d, conv (reference: Captum's rules apply)"]().eval()
    x = torch.rand(4, 1, 16, 16)
    found = compare(model, x, torch.rand(4, 1, 16, 16))
    assert found["relative_difference"] < 1e-5 and found["captum_gap"] < 1e-5, found
