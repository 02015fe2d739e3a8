"""Gray images fed to a model built for RGB are refused even when broadcasting lets them through
(a three-channel normalisation turns (B, 1, H, W) into (B, 3, H, W) before the first convolution):
the model's first convolution is compared with the data's channels, before any training."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from robust_train.data import SyntheticDataModule
from robust_train.models import TorchvisionClassifier
from robust_train.models.input_check import (
    DataMismatchError,
    check_model_fits_data,
    first_conv_channels,
)

USER_NET = '''
import torch
from torch import nn


class Net(nn.Module):
    """An RGB classifier that normalises its input with per-channel statistics."""

    def __init__(self, num_classes: int = 2):
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, num_classes)

    def forward(self, x):
        x = torch.relu(self.conv((x - self.mean) / self.std))
        return self.head(x.mean(dim=(2, 3)))
'''


def _user_net() -> type[nn.Module]:
    namespace: dict = {}
    exec(compile(USER_NET, "user_net.py", "exec"), namespace)  # noqa: S102 - the test's own code
    return namespace["Net"]


def _data(channels: int) -> SyntheticDataModule:
    return SyntheticDataModule(num_samples=8, image_size=8, in_channels=channels, num_classes=2)


def test_broadcasting_does_not_hide_gray_images_from_an_rgb_model():
    net = _user_net()()
    assert net(torch.zeros(1, 1, 8, 8)).shape == (1, 2)  # the forward alone lets gray through
    with pytest.raises(DataMismatchError) as refused:
        check_model_fits_data(net, _data(channels=1))
    message = str(refused.value)
    assert "\n" not in message
    assert "the model (Net) expects 3-channel images" in message
    assert "'conv' has in_channels=3" in message
    assert "the data (SyntheticDataModule) gives 1x8x8" in message
    check_model_fits_data(net, _data(channels=3))  # RGB data fits

    class Repeats(nn.Module):  # converts gray to RGB on purpose, and says so
        in_channels = 1

        def __init__(self):
            super().__init__()
            self.net = _user_net()()

        def forward(self, x):
            return self.net(x.expand(-1, 3, -1, -1))

    check_model_fits_data(Repeats(), _data(channels=1))
    gray_resnet = TorchvisionClassifier("resnet18", num_classes=2, in_channels=1)
    check_model_fits_data(gray_resnet, _data(channels=1))  # states 1 channel: its repeat is meant


def test_a_plain_module_whose_first_layer_is_an_rgb_convolution():
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(2))
    assert first_conv_channels(net, torch.zeros(1, 1, 8, 8)) == ("0", 3)
    with pytest.raises(
        DataMismatchError,
        match=r"\(Sequential\) expects 3-channel images .*'0' has in_channels=3.* gives 1x8x8",
    ):
        check_model_fits_data(net, _data(channels=1))
    assert not net[0]._forward_pre_hooks  # the probe's hooks are gone
    assert first_conv_channels(nn.Sequential(nn.Flatten()), torch.zeros(1, 1, 2, 2)) is None


def test_fit_refuses_gray_images_for_a_user_rgb_module_before_training(tmp_path, cli, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # the working folder's module is imported
    (tmp_path / "usernet.py").write_text(USER_NET)
    rng = np.random.default_rng(0)
    for cls in ("a", "b"):
        folder = tmp_path / "images" / "train" / cls
        folder.mkdir(parents=True)
        for i in range(2):
            Image.fromarray(rng.integers(0, 255, (8, 8), dtype=np.uint8)).save(folder / f"{i}.png")
    (tmp_path / "cfg.yaml").write_text(
        "experiment: gray\n"
        "trainer: {max_epochs: 1, accelerator: cpu, logger: false, enable_progress_bar: false}\n"
        "model:\n  model: {class_path: usernet.Net, init_args: {num_classes: 2}}\n"
        "data:\n  class_path: robust_train.data.ImageFolderDataModule\n"
        "  init_args: {root: images, image_size: 8, batch_size: 2, grayscale: true,"
        " val_fraction: 0.5}\n"
    )
    try:
        done = cli("fit", "--config", "cfg.yaml", cwd=tmp_path)
    finally:
        sys.modules.pop("usernet", None)
    assert done.returncode == 2, done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("robust-train: error: the model (Net) expects 3-channel images"), line
    assert "the data (ImageFolderDataModule) gives 1x8x8" in line
    assert not Path(tmp_path / "checkpoints" / "gray").exists()
