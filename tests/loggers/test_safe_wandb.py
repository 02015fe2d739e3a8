"""SafeWandbLogger: offline by default, failures become one warning and never stop training."""

from __future__ import annotations

import socket
import time
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
from pytorch_lightning.loggers import WandbLogger
from pytorch_lightning.utilities.exceptions import SIGTERMException
from torch.utils.data import DataLoader, TensorDataset

from robust_train import RobustClassifier
from robust_train.training.loggers import SafeWandbLogger
from tests.support.helpers import TinyCNN, digits_tensors


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


class FakeRun:
    """Stands for a wandb run: takes every call, remembers how it was finished."""

    def __init__(self) -> None:
        self.config = SimpleNamespace(update=lambda *a, **k: None)
        self.exit_code: int | None = None

    def finish(self, exit_code: int | None = None) -> None:
        self.exit_code = exit_code

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


@pytest.fixture
def fake_runs(monkeypatch):
    """WandbLogger's run creation replaced: no W&B process; records the init arguments."""
    started = []

    def experiment(self):
        if self._experiment is None:
            started.append(dict(self._wandb_init))
            self._experiment = FakeRun()
        return self._experiment

    monkeypatch.setattr(WandbLogger, "experiment", property(experiment))
    return started


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again when the block ends: nothing listens


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "192.0.2.1:80"])  # refused; unroutable
def test_online_without_a_server_falls_back_to_offline_quickly(
    tmp_path, monkeypatch, fake_runs, host
):
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_BASE_URL", "http://" + host.format(port=_closed_port()))
    monkeypatch.setenv("ROBUST_TRAIN_WANDB_TIMEOUT", "0.3")
    logger = SafeWandbLogger(save_dir=str(tmp_path))
    assert not logger.is_offline
    start = time.perf_counter()
    with pytest.warns(UserWarning, match="cannot be reached .* written offline"):
        assert isinstance(logger.experiment, FakeRun)
    assert time.perf_counter() - start < 2.0
    assert logger.is_offline and fake_runs[-1]["mode"] == "offline"


def test_a_reachable_server_keeps_the_run_online(tmp_path, monkeypatch, fake_runs):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("WANDB_MODE", "online")
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
        logger = SafeWandbLogger(save_dir=str(tmp_path))
        logger.experiment  # noqa: B018
    assert not logger.is_offline and "mode" not in fake_runs[-1]


class Terminate(pl.Callback):
    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.current_epoch == 1:
            raise SIGTERMException()


def test_a_fit_stopped_by_sigterm_is_finished_as_failed(tmp_path, fake_runs):
    x, y = digits_tensors()
    loader = DataLoader(TensorDataset(x[:64], y[:64]), batch_size=64)
    logger = SafeWandbLogger(save_dir=str(tmp_path))
    trainer = pl.Trainer(
        max_epochs=3, logger=logger, default_root_dir=str(tmp_path), callbacks=[Terminate()],
        accelerator="cpu", enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    with pytest.raises(SIGTERMException):
        trainer.fit(RobustClassifier(TinyCNN()), loader, loader)
    assert logger.checkpoint_saved  # the first epoch's checkpoint: the run is kept ...
    assert logger._experiment.exit_code == 1  # ... and recorded as not finished successfully
    done = SafeWandbLogger(save_dir=str(tmp_path))
    done._experiment, done.checkpoint_saved = FakeRun(), True
    done.finalize("success")
    assert done._experiment.exit_code is None  # a finished fit is W&B's ordinary finish
