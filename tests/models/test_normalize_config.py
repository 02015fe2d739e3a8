"""Normalize layer, model_config / build_model round trips."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn
from torchvision.transforms import Normalize as TVNormalize

from robust_train.models import (
    Normalize,
    RecordsConfig,
    ResNet18CIFAR,
    SmallCNN,
    TorchvisionClassifier,
    build_model,
    model_config,
    softplus,
)
from robust_train.models.normalize import channel_stats


def test_normalize_matches_torchvision():
    mean, std = [0.1, 0.5, 0.9], [0.2, 0.3, 0.4]
    x = torch.rand(4, 3, 5, 6)
    torch.testing.assert_close(Normalize(mean, std)(x), TVNormalize(mean, std)(x))


def test_normalize_scalar_broadcasts_and_buffers_persist():
    norm = Normalize(0.5, 0.25)
    x = torch.rand(2, 4, 3, 3)
    torch.testing.assert_close(norm(x), (x - 0.5) / 0.25)
    assert set(norm.state_dict()) == {"mean", "std"}
    assert norm.double()(x.double()).dtype == torch.float64


@pytest.mark.parametrize(
    ("mean", "std", "match"),
    [
        ([0.5, 0.5], [1.0, 1.0, 1.0], "same length"),
        (0.5, 0.0, "std"),
        ([0.5], [-1.0], "std"),
        (float("nan"), 1.0, "mean"),
        ([], [], "empty"),
    ],
)
def test_normalize_rejects_bad_statistics(mean, std, match):
    with pytest.raises(ValueError, match=match):
        Normalize(mean, std)


def test_normalize_rejects_wrong_channel_count():
    with pytest.raises(ValueError, match="3 channel"):
        Normalize([0.5] * 3, [0.2] * 3)(torch.rand(1, 1, 4, 4))


def test_channel_stats():
    assert channel_stats((0.25, 0.5, 0.75), 1) == [0.5]
    assert channel_stats([0.1, 0.2], 2) == [0.1, 0.2]
    with pytest.raises(ValueError, match="entries"):
        channel_stats([0.1, 0.2], 3)


@pytest.mark.parametrize(
    "make",
    [
        lambda: SmallCNN(in_channels=3, width=8, mean=(0.1, 0.2, 0.3), std=0.5, batchnorm=True),
        lambda: ResNet18CIFAR(num_classes=4, width=4),
        lambda: TorchvisionClassifier("squeezenet1_1", num_classes=5),
    ],
)
def test_config_round_trip(make):
    model = make().eval()
    config = model_config(model)
    rebuilt = build_model(config)
    assert type(rebuilt) is type(model)
    assert model_config(rebuilt) == config
    rebuilt.load_state_dict(model.state_dict())
    x = torch.rand(2, 3, 32, 32)
    torch.testing.assert_close(rebuilt.eval()(x), model(x))


def test_config_records_defaults_with_public_path_and_plain_values():
    config = model_config(SmallCNN(width=8, mean=(0.3,), std=torch.tensor([0.4])))
    assert config["class_path"] == "robust_train.models.SmallCNN"
    assert config["init_args"] == {
        "in_channels": 1,
        "num_classes": 10,
        "input_size": 8,
        "width": 8,
        "mean": [0.3],
        "std": [pytest.approx(0.4)],
        "dropout": 0.0,
        "batchnorm": False,
        "pool_size": 4,
    }
    buffer = io.BytesIO()
    torch.save({"model": config}, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True)["model"] == config


def test_softplus_copy_keeps_config():
    model = SmallCNN(width=8)
    assert model_config(softplus(model, 5.0)) == model_config(model)


class _Base(RecordsConfig, nn.Module):
    def __init__(self, width: int = 2, **extra):
        super().__init__()
        self.fc = nn.Linear(2, width)


class _Child(_Base):
    def __init__(self, depth: int = 3):
        super().__init__(width=depth + 1)


def test_subclass_records_outermost_arguments_and_kwargs():
    child = model_config(_Child(depth=5))
    assert child["class_path"].endswith("_Child") and child["init_args"] == {"depth": 5}
    assert model_config(_Base(4, scale=2))["init_args"] == {"width": 4, "scale": 2}


def test_model_config_rejects_unrecorded_modules():
    with pytest.raises(TypeError, match="does not record"):
        model_config(nn.Linear(2, 2))


class _Bad(RecordsConfig, nn.Module):
    def __init__(self, width: object = None):
        super().__init__()


def test_model_config_rejects_objects():
    with pytest.raises(TypeError, match="`width` of _Bad"):
        model_config(_Bad(width=object()))


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        ({"init_args": {}}, ValueError, "class_path"),
        ({"class_path": "robust_train.models.NoSuchNet"}, ImportError, "NoSuchNet"),
        ({"class_path": "nowhere.Net"}, ImportError, "nowhere"),
        (
            {"class_path": "robust_train.models.Normalize.forward"},
            TypeError,
            "not a torch.nn.Module subclass",
        ),
        (
            {"class_path": "robust_train.models.SmallCNN", "init_args": {"depth": 3}},
            TypeError,
            "depth",
        ),
        ({"class_path": "robust_train.models.SmallCNN", "init_args": [1]}, ValueError, "init_args"),
    ],
)
def test_build_model_errors(config, error, match):
    with pytest.raises(error, match=match):
        build_model(config)


def test_build_model_skip_pretrained_applies_class_overrides():
    config = {
        "class_path": "robust_train.models.TorchvisionClassifier",
        "init_args": {"name": "squeezenet1_1", "weights_path": "/nonexistent/file.pth"},
    }
    with pytest.raises(FileNotFoundError, match="nonexistent"):
        build_model(config)
    assert (
        model_config(build_model(config, skip_pretrained=True))["init_args"]["load_weights"]
        is False
    )
