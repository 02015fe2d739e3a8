"""`check_model_fits_data`: the probe forward that refuses data not fitting a model (through the
console script in tests/cli/test_model_data_fit.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robust_train.data import SyntheticDataModule
from robust_train.models import MNISTConvNet, SmallCNN, TorchvisionClassifier
from robust_train.models.input_check import DataMismatchError, check_model_fits_data


def _data(channels: int = 1, size: int = 8, classes: int = 10) -> SyntheticDataModule:
    return SyntheticDataModule(
        num_samples=8, image_size=size, in_channels=channels, num_classes=classes
    )


def test_recorded_size_and_channels_are_compared_before_the_forward():
    with pytest.raises(
        DataMismatchError, match=r"\(MNISTConvNet\) expects images of 1x28x28 .* gives 1x8x8"
    ):
        check_model_fits_data(MNISTConvNet(hidden=8), _data(size=8))
    rgb = TorchvisionClassifier("resnet18", num_classes=10)
    with pytest.raises(
        DataMismatchError, match=r"expects images of 3 channel\(s\) \(any size\) .* 1x32x32"
    ):
        check_model_fits_data(rgb, _data(size=32))


def test_outputs_against_classes_and_a_model_that_cannot_run():
    with pytest.raises(DataMismatchError, match="has 10 outputs but the data .* has 3 classes"):
        check_model_fits_data(SmallCNN(), _data(classes=3))
    plain = nn.Sequential(nn.Flatten(), nn.Linear(784, 10))  # records nothing: only the probe tells
    with pytest.raises(
        DataMismatchError, match=r"\(Sequential\) cannot take the data's images \(1x8x8\): mat1"
    ):
        check_model_fits_data(plain, _data())
    check_model_fits_data(nn.Sequential(nn.Flatten(), nn.Linear(64, 10)), _data())  # fits

    class Pair(nn.Module):
        def forward(self, x):
            return x, x

    with pytest.raises(DataMismatchError, match="returns a tuple"):
        check_model_fits_data(Pair(), _data())


def test_undeclared_data_is_probed_with_its_first_image_and_modes_are_kept():
    class Shapeless:  # declares nothing
        pass

    model = SmallCNN(num_classes=10, dropout=0.5).train()
    batches = [(torch.rand(4, 1, 12, 12), torch.zeros(4).long())]
    with pytest.raises(DataMismatchError, match="1x8x8 but the data .* gives 1x12x12"):
        check_model_fits_data(model, Shapeless(), batches)
    check_model_fits_data(model, Shapeless(), [(torch.rand(4, 1, 8, 8), torch.zeros(4))])
    check_model_fits_data(model, Shapeless())  # nothing to probe with: no error
    assert model.training
