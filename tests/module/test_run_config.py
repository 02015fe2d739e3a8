"""Hyper-parameters hold constructor arguments only; descriptions travel beside them.

LightningCLI feeds a checkpoint's hparams back to its parser on `--ckpt_path`, so a key that is
not an argument of `RobustClassifier` (the old `penalty_terms`, `model_class`) stops every resume.
"""

from __future__ import annotations

import inspect

import pytorch_lightning as pl
import torch
import yaml
from pytorch_lightning.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from robust_train import RobustClassifier
from robust_train.regularizers import Curvature
from tests.support.helpers import TinyCNN, digits_tensors


def _fit(module: RobustClassifier, tmp_path) -> pl.Trainer:
    x, y = digits_tensors()
    loader = DataLoader(TensorDataset(x[:64], y[:64]), batch_size=32)
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=CSVLogger(tmp_path),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(module, loader)
    return trainer


def test_checkpoint_hparams_are_constructor_arguments(tmp_path):
    module = RobustClassifier(TinyCNN(), penalties=[Curvature(weight=0.01, seed=0)])
    trainer = _fit(module, tmp_path)
    trainer.save_checkpoint(tmp_path / "a.ckpt")
    ckpt = torch.load(tmp_path / "a.ckpt", map_location="cpu", weights_only=True)
    arguments = set(inspect.signature(RobustClassifier.__init__).parameters) - {"self"}
    assert set(ckpt["hyper_parameters"]) <= arguments, set(ckpt["hyper_parameters"]) - arguments
    assert ckpt["robust_train"]["model_class"] == "TinyCNN"
    assert ckpt["robust_train"]["penalties"] == ["Curvature(name='curvature', weight=0.01)"]


def test_run_config_reaches_the_logger(tmp_path):
    module = RobustClassifier(TinyCNN(), penalties=[Curvature(weight=0.01, seed=0)])
    assert module.run_config() == {
        "model_class": "TinyCNN",
        "penalty_terms": ["Curvature(name='curvature', weight=0.01)"],
    }
    trainer = _fit(module, tmp_path)
    logged = yaml.safe_load(open(f"{trainer.logger.log_dir}/hparams.yaml"))
    assert logged["model_class"] == "TinyCNN"
    assert logged["penalty_terms"] == ["Curvature(name='curvature', weight=0.01)"]
    assert logged["on_nonfinite"] == "raise"  # the hparams are still there
