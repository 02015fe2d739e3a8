"""SyntheticDataModule, get_datamodule / datamodule_config, and use by a Lightning Trainer."""

from __future__ import annotations

import importlib

import pytest
import pytorch_lightning as pl
import torch
from torch import nn

from robust_train.data import (
    DATAMODULES,
    CIFAR10DataModule,
    DigitsDataModule,
    SyntheticDataModule,
    datamodule_config,
    get_datamodule,
)
from robust_train.models import SmallCNN


def test_synthetic_shapes_range_and_seed():
    dm = SyntheticDataModule(
        num_samples=40, image_size=(12, 10), in_channels=2, num_classes=4, seed=3
    )
    assert (dm.num_classes, dm.in_channels, dm.image_size) == (4, 2, (12, 10))
    dm.setup()
    x, y = dm.train_set.tensors
    assert x.shape == (40, 2, 12, 10) and y.shape == (40,) and int(y.max()) < 4
    assert float(x.min()) >= 0 and float(x.max()) <= 1
    assert len(dm.val_set) == len(dm.test_set) == 10
    same = SyntheticDataModule(
        num_samples=40, image_size=(12, 10), in_channels=2, num_classes=4, seed=3
    )
    same.setup()
    assert torch.equal(same.test_set.tensors[0], dm.test_set.tensors[0])


@pytest.mark.parametrize(("noise", "learnable"), [(0.5, True), (1.0, False)])
def test_synthetic_labels_carry_signal_unless_pure_noise(noise, learnable):
    dm = SyntheticDataModule(num_samples=200, num_classes=5, noise=noise)
    dm.setup()
    x_train, y_train = dm.train_set.tensors
    x_test, y_test = dm.test_set.tensors
    centroids = torch.stack([x_train[y_train == c].mean(0) for c in range(5)]).flatten(1)
    predicted = torch.cdist(x_test.flatten(1), centroids).argmin(1)
    accuracy = float((predicted == y_test).float().mean())
    assert (accuracy > 0.95) if learnable else (accuracy < 0.6)


def test_get_datamodule_and_config_round_trip():
    assert set(DATAMODULES) == {
        "digits",
        "mnist5k",
        "cluttered_mnist5k",
        "mnist",
        "fashion_mnist",
        "cifar10",
        "image_folder",
        "synthetic",
    }
    assert isinstance(get_datamodule("cifar10", data_dir="somewhere"), CIFAR10DataModule)
    with pytest.raises(ValueError, match="digits"):
        get_datamodule("imagenet")
    dm = get_datamodule("digits", batch_size=16, seed=2)
    config = datamodule_config(dm)
    assert config["class_path"] == "robust_train.data.DigitsDataModule"
    module, name = config["class_path"].rsplit(".", 1)
    rebuilt = getattr(importlib.import_module(module), name)(**config["init_args"])
    assert isinstance(rebuilt, DigitsDataModule) and dict(rebuilt.hparams) == dict(dm.hparams)


class _Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = SmallCNN(width=4, in_channels=3, input_size=32)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.model(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.model(x), y))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def test_lightning_trainer_runs_on_a_datamodule(tmp_path):
    dm = SyntheticDataModule(num_samples=16, batch_size=8)
    trainer = pl.Trainer(
        max_epochs=1,
        limit_val_batches=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(_Classifier(), datamodule=dm)
    assert trainer.global_step == 2 and "val_loss" in trainer.callback_metrics
