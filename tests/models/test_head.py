"""One `find_head` (robust_train.models.head) for fine-tuning and torchvision surgery: a named
path first, then torchvision's head attributes, then the last nn.Linear."""

from __future__ import annotations

import pytest
from torch import nn

from robust_train.models import SmallCNN
from robust_train.models.head import find_head


class _Aux(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 3)
        self.aux = nn.Linear(8, 5)  # registered after `fc`: the last nn.Linear is not the head


def test_a_named_path_wins_and_names_its_parent():
    net = nn.Sequential(nn.Flatten(), nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 3)))
    head = find_head(net, "1.0")
    assert head.parent is net[1] and head.attr == "0" and head.module is net[1][0]


def test_torchvision_attributes_come_before_the_last_linear():
    model = _Aux()
    assert find_head(model).module is model.fc
    squeeze = nn.Module()
    squeeze.classifier = nn.Sequential(nn.Dropout(), nn.Conv2d(4, 3, 1), nn.ReLU())
    assert find_head(squeeze).name == "classifier.1"


def test_the_last_linear_when_no_attribute_matches():
    wrapped = nn.Sequential(nn.Flatten(), SmallCNN())
    head = find_head(wrapped)
    assert head.name == "1.classifier" and head.module is wrapped[1].classifier


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="`head` 'nope'"):
        find_head(SmallCNN(), "nope")
    with pytest.raises(ValueError, match="Cannot find the classification head of Sequential"):
        find_head(nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU()))
