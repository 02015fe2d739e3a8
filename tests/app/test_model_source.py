"""`robust_train.app.model_source`: state-dict layouts, tensors-only reading, model specs. The
command line is tested in tests/cli/test_user_models.py."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

from robust_train.app.model_source import (
    ModelSource,
    WeightsError,
    build_source_model,
    fit_state_dict,
    model_source_from,
    read_state_dict,
)
from robust_train.data import SyntheticDataModule
from robust_train.models import SmallCNN


def _net() -> nn.Module:
    torch.manual_seed(0)
    return SmallCNN(width=4, num_classes=3)


@pytest.mark.parametrize(
    "wrap",
    [
        lambda sd: sd,
        lambda sd: {"state_dict": {f"model.{k}": v for k, v in sd.items()}, "epoch": 1},
        lambda sd: {"model": {f"module.{k}": v for k, v in sd.items()}},
        lambda sd: {"model_state_dict": sd, "optimizer_state_dict": {}},
        lambda sd: {f"_orig_mod.{k}": v for k, v in sd.items()},
        lambda sd: {"state_dict": {f"model.module.{k}": v for k, v in sd.items()}},
    ],
    ids=["plain", "lightning", "ddp-nested", "model_state_dict", "compiled", "lightning-ddp"],
)
def test_every_layout_loads_the_same_weights(tmp_path: Path, wrap):
    source = _net()
    torch.save(wrap(source.state_dict()), tmp_path / "w.pt")
    target = SmallCNN(width=4, num_classes=3)
    target.load_state_dict(fit_state_dict(read_state_dict(tmp_path / "w.pt"), target, "w.pt"))
    x = torch.rand(2, 1, 8, 8)
    assert torch.equal(target.eval()(x), source.eval()(x))


def test_mismatches_name_the_file_and_the_keys(tmp_path: Path):
    state = _net().state_dict()
    state["extra.weight"] = state.pop("classifier.weight")
    with pytest.raises(WeightsError, match=r"'w.pt' does not fit SmallCNN.*classifier\.weight"):
        fit_state_dict(state, SmallCNN(width=4, num_classes=3), "w.pt")
    with pytest.raises(WeightsError, match=r"extra\.weight"):
        fit_state_dict(state, SmallCNN(width=4, num_classes=3), "w.pt")
    wide = SmallCNN(width=8, num_classes=3).state_dict()
    with pytest.raises(WeightsError, match=r"shape mismatches.*file \(8, 1, 3, 3\)"):
        fit_state_dict(wide, SmallCNN(width=4, num_classes=3), "w.pt")


def test_only_tensors_are_read(tmp_path: Path):
    torch.save(nn.Linear(2, 2), tmp_path / "module.pt")  # a pickled module, not a state dict
    with pytest.raises(WeightsError, match=r"module\.pt.*tensors-only"):
        read_state_dict(tmp_path / "module.pt")
    torch.save({"epoch": 3, "lr": 0.1}, tmp_path / "meta.pt")
    with pytest.raises(WeightsError, match=r"meta\.pt.*holds no state dict.*epoch"):
        read_state_dict(tmp_path / "meta.pt")


def test_torchvision_spec_takes_plain_torchvision_weights_and_their_head(tmp_path: Path):
    torch.manual_seed(0)
    tv = torchvision.models.resnet18(num_classes=2)
    torch.save(tv.state_dict(), tmp_path / "r18.pt")
    grey = SyntheticDataModule(image_size=32, in_channels=1, num_classes=5)
    model = build_source_model(ModelSource("torchvision:resnet18", str(tmp_path / "r18.pt")), grey)
    x = torch.rand(2, 1, 32, 32)
    mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
    expected = tv.eval()((x.expand(-1, 3, -1, -1) - mean[:, None, None]) / std[:, None, None])
    assert model(x).shape == (2, 2)  # the weights' head, not the data's 5 classes
    assert torch.allclose(model(x), expected, atol=1e-5)


def test_yaml_specs_resolve_to_modules_before_building(tmp_path: Path):
    fit = tmp_path / "fit.yaml"
    fit.write_text(
        "model:\n  softplus_beta: 10.0\n  model:\n    class_path: robust_train.models.SmallCNN\n"
        "    init_args: {width: 4, num_classes: 3}\ndata: {}\n"
    )
    model = build_source_model(ModelSource(str(fit)), SyntheticDataModule())
    assert isinstance(model, SmallCNN) and model.training is False
    assert any(isinstance(m, nn.Softplus) for m in model.modules())  # softplus_beta applied
    args = argparse.Namespace(model="collections.OrderedDict", weights=None, data_config="d.yaml")
    with pytest.raises(TypeError, match="not a torch.nn.Module subclass"):
        model_source_from(args)
