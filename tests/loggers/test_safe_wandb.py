"""SafeWandbLogger: offline by default, failures become one warning and never stop training."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
from helpers import TinyCNN, digits_tensors
from torch.utils.data import DataLoader, TensorDataset

from robust_train import RobustClassifier
from robust_train.training.loggers import SafeWandbLogger


def test_offline_by_default_and_online_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert SafeWandbLogger(save_dir=str(tmp_path)).is_offline
    monkeypatch.setenv("WANDB_MODE", "online")
    assert not SafeWandbLogger(save_dir=str(tmp_path)).is_offline
    assert SafeWandbLogger(save_dir=str(tmp_path), offline=True).is_offline


class BrokenStart(SafeWandbLogger):
    """A run that cannot start (as with no server and no key in online mode)."""

    def _start(self):
        raise ConnectionError("wandb server unreachable")

    @property
    def experiment(self):
        if self.failed is not None:
            return None
        return self._guard("starting the run", self._start)


def test_a_run_that_cannot_start_does_not_stop_training_or_checkpointing(tmp_path):
    x, y = digits_tensors()
    loader = DataLoader(TensorDataset(x[:128], y[:128]), batch_size=64)
    logger = BrokenStart(save_dir=str(tmp_path))
    trainer = pl.Trainer(
        max_epochs=2,
        logger=logger,
        default_root_dir=str(tmp_path),
        accelerator="cpu",
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    with pytest.warns(UserWarning, match="W&B starting the run failed.*unreachable") as record:
        trainer.fit(RobustClassifier(TinyCNN()), loader, loader)
    assert sum("W&B" in str(w.message) for w in record) == 1
    assert trainer.current_epoch == 2
    assert list(tmp_path.rglob("*.ckpt")), "the checkpoint must still be written"
    assert logger.failed is not None


def test_one_failing_kind_of_call_leaves_the_others(tmp_path):
    logger = SafeWandbLogger(save_dir=str(tmp_path))
    calls = []
    with pytest.warns(UserWarning, match="log_image failed"):
        logger._guard("log_image", lambda: 1 / 0)
    assert logger._guard("log_image", lambda: calls.append("image")) is None
    logger._guard("log_metrics", lambda: calls.append("metrics"))
    assert calls == ["metrics"] and logger.failed is None
