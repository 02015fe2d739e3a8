"""Tensors-only loading and its opt-ins, in Python: read_checkpoint,
load_classifier(trusted=), RobustClassifier(trust_init_checkpoint=),
TorchvisionClassifier(trust_weights_path=), what fit checkpoints hold, and record_config."""

from __future__ import annotations

import fractions
import os
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from robust_train import RobustClassifier
from robust_train.core.trust import ClassPathError, resolve_class
from robust_train.models import SmallCNN, TorchvisionClassifier, model_config
from robust_train.models.config import record_config
from robust_train.models.loading import (
    UntrustedCheckpointError,
    checkpoint_safe,
    load_classifier,
    read_checkpoint,
)


class _Marker:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_a_pickled_call_is_refused_and_runs_nothing(tmp_path: Path):
    marker = tmp_path / "MARKER"
    torch.save({"state_dict": {}, "x": _Marker(marker)}, tmp_path / "evil.ckpt")
    with pytest.raises(UntrustedCheckpointError) as info:
        read_checkpoint(tmp_path / "evil.ckpt")
    message = str(info.value)
    assert "\n" not in message and "evil.ckpt" in message and "posix.system" in message
    assert "trusted=True" in message
    with pytest.raises(UntrustedCheckpointError, match="--my-flag"):
        load_classifier(tmp_path / "evil.ckpt", opt_in="pass --my-flag")
    assert not marker.exists()


def test_plain_paths_load_tensors_only_and_corrupt_files_say_so(tmp_path: Path):
    torch.save({"root": Path("/data/images"), "w": torch.ones(2)}, tmp_path / "paths.ckpt")
    assert read_checkpoint(tmp_path / "paths.ckpt")["root"] == Path("/data/images")
    (tmp_path / "text.ckpt").write_text("garbage")
    with pytest.raises(RuntimeError, match="text.ckpt.*corrupt.*neither a torch zip"):
        read_checkpoint(tmp_path / "text.ckpt")
    with pytest.raises(RuntimeError, match="text.ckpt.*corrupt"):
        read_checkpoint(tmp_path / "text.ckpt", trusted=True)


def _with_object(model: nn.Module, path: Path, as_state_dict: bool = False) -> Path:
    state = dict(model.state_dict())
    if as_state_dict:
        torch.save({"state_dict": state, "note": fractions.Fraction(1, 3)}, path)
    else:
        prefixed = {f"model.{k}": v for k, v in state.items()}
        torch.save(
            {"state_dict": prefixed, "robust_train": {"model": model_config(model)},
             "hyper_parameters": {"ratio": fractions.Fraction(1, 3)}},
            path,
        )  # fmt: skip
    return path


def test_init_checkpoint_needs_its_own_opt_in(tmp_path: Path):
    source = SmallCNN(width=4)
    path = _with_object(source, tmp_path / "start.ckpt")
    with pytest.raises(UntrustedCheckpointError, match="start.ckpt.*trust_init_checkpoint: true"):
        RobustClassifier(SmallCNN(width=4), init_checkpoint=str(path))
    module = RobustClassifier(
        SmallCNN(width=4), init_checkpoint=str(path), trust_init_checkpoint=True
    )
    x = torch.rand(2, 1, 8, 8)
    torch.testing.assert_close(module.model.eval()(x), source.eval()(x))


def test_weights_path_needs_its_own_opt_in(tmp_path: Path):
    source = TorchvisionClassifier("squeezenet1_1", num_classes=1000)
    path = _with_object(source.backbone, tmp_path / "weights.pth", as_state_dict=True)
    with pytest.raises(UntrustedCheckpointError, match="weights.pth.*trust_weights_path: true"):
        TorchvisionClassifier("squeezenet1_1", weights_path=str(path))
    net = TorchvisionClassifier("squeezenet1_1", weights_path=str(path), trust_weights_path=True)
    x = torch.rand(1, 3, 64, 64)
    torch.testing.assert_close(net.eval()(x), source.eval()(x))


class _PathData(pl.LightningDataModule):
    """A user datamodule whose hyper-parameters hold a Path and a function."""

    def __init__(self, root: Path, transform=abs):
        super().__init__()
        self.save_hyperparameters()

    def _loader(self) -> DataLoader:
        g = torch.Generator().manual_seed(0)
        data = TensorDataset(torch.rand(16, 1, 8, 8, generator=g), torch.arange(16) % 10)
        return DataLoader(data, batch_size=8)

    def train_dataloader(self) -> DataLoader:
        return self._loader()

    def val_dataloader(self) -> DataLoader:
        return self._loader()


def test_fit_checkpoints_hold_plain_values_only(tmp_path: Path):
    trainer = pl.Trainer(
        max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True)],  # Lightning's own
    )  # fmt: skip
    trainer.fit(RobustClassifier(SmallCNN(width=4)), datamodule=_PathData(tmp_path / "imgs"))
    ckpt = torch.load(tmp_path / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["datamodule_hyper_parameters"]["root"] == str(tmp_path / "imgs")
    assert ckpt["datamodule_hyper_parameters"]["transform"] == repr(abs)
    assert isinstance(load_classifier(tmp_path / "last.ckpt"), SmallCNN)


def test_checkpoint_safe_keeps_plain_values_and_describes_the_rest():
    from jsonargparse import Namespace

    value = {"n": Namespace(a=1, b=Path("p")), "t": (1, 2.0), "f": len, "x": torch.ones(1)}
    safe = checkpoint_safe(value)
    assert safe["n"] == {"a": 1, "b": "p"} and safe["t"] == (1, 2.0)
    assert safe["f"] == repr(len) and safe["x"] is value["x"]


class _Wide(nn.Module):
    def __init__(self, width: int = 3, inner: nn.Module | None = None):
        super().__init__()
        self.fc = nn.Linear(2, width)


def test_record_config_only_for_the_class_and_plain_args_given():
    net = _Wide(width=5)
    path = f"{__name__}._Wide"
    assert not record_config(net, {"class_path": "torch.nn.Linear", "init_args": {}})
    nested = {"inner": {"class_path": "torch.nn.ReLU", "init_args": {}}}
    assert not record_config(net, {"class_path": path, "init_args": nested})
    assert record_config(net, {"class_path": path, "init_args": {"width": 5, "inner": None}})
    assert model_config(net)["init_args"] == {"width": 5, "inner": None}
    small = SmallCNN(width=4)  # RecordsConfig: its own record is kept
    assert not record_config(small, {"class_path": "robust_train.models.SmallCNN"})
    assert model_config(small)["init_args"]["width"] == 4


def test_resolve_class_refuses_other_callables_before_calling_them():
    with pytest.raises(ClassPathError, match=r"'os.system' \(x\.ckpt\) is not a torch.nn.Module"):
        resolve_class("os.system", nn.Module, "x.ckpt")
    with pytest.raises(ClassPathError, match=r"is not a pytorch_lightning.LightningDataModule"):
        resolve_class("torch.nn.Linear", pl.LightningDataModule, "x.ckpt")
