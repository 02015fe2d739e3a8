"""Monitors with W&B in offline mode, read back from the run file on disk (no mocks)."""

from __future__ import annotations

import math
import warnings

import pytest
import pytorch_lightning as pl
from pytorch_lightning.loggers import WandbLogger

from robust_train.callbacks import RobustnessMonitor
from robust_train.training.loggers import SafeWandbLogger
from tests.support.monitor_helpers import CHEAP, TRAINER
from tests.support.wandb_reader import read_run

SCALARS = (
    [
        f"robustness/attack/saliency/{a}/{m}"
        for a in ("random_sign", "topk", "mass_center")
        for m in ("topk_intersection", "spearman", "kendall", "center_shift")
    ]
    + ["robustness/lipschitz/saliency/lipschitz", "robustness/lipschitz/input_x_gradient/lipschitz"]
    + [
        f"robustness/fidelity/{e}/{m}"
        for e in ("saliency", "input_x_gradient")
        for m in ("mif_auc", "lif_auc", "fidelity")
    ]
    + [f"robustness/seconds/{m}" for m in ("fragility", "lipschitz", "fidelity", "total")]
)


@pytest.fixture
def offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield tmp_path
    import wandb

    wandb.finish()


def monitor() -> RobustnessMonitor:
    return RobustnessMonitor(
        explainers=["saliency", "input_x_gradient"],
        n_steps=2,
        lipschitz_samples=2,
        fidelity_steps=4,
        **CHEAP,
    )


def fit(module, data, logger) -> pl.Trainer:
    trainer = pl.Trainer(
        max_epochs=2, logger=logger, callbacks=[monitor()], enable_checkpointing=False, **TRAINER
    )
    trainer.fit(module, datamodule=data)
    logger.experiment.finish()  # flush the run file (Lightning leaves the run open)
    return trainer


@pytest.mark.slow
def test_offline_wandb_run_holds_scalars_images_and_curves(offline, module, data):
    fit(module, data, SafeWandbLogger(save_dir=str(offline)))
    run = read_run(offline)
    for key in SCALARS:
        values = run.column(key)
        assert len(values) == 2, key  # one per epoch
        assert all(isinstance(v, float | int) and math.isfinite(v) for v in values), key
        assert math.isfinite(run.summary[key]), key
    epochs = [
        row["epoch"] for row in run.history if "robustness/attack/saliency/topk/kendall" in row
    ]
    assert epochs == [0, 1]
    for attack in ("random_sign", "topk", "mass_center"):
        logged = run.column(f"robustness/attack/saliency/{attack}/examples/filenames")
        assert len(logged) == 2, attack
        for names in logged:
            assert len(names) == 1 and (run.files_dir / names[0]).is_file()
            assert names[0].startswith("media/images/")
    for explainer in ("saliency", "input_x_gradient"):
        tables = run.column(f"robustness/fidelity/{explainer}/curves_table/path")
        assert len(tables) == 2 and all((run.files_dir / t).is_file() for t in tables)


class FailingImagesLogger(WandbLogger):
    """A W&B logger whose image upload fails (a full disk, a server error...)."""

    def log_image(self, key, images, step=None, **kwargs):
        raise OSError("no space left on device")


@pytest.mark.slow
def test_failing_log_image_warns_once_and_scalars_still_arrive(offline, module, data):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = fit(module, data, FailingImagesLogger(save_dir=str(offline), offline=True))
    ours = [w for w in caught if "RobustnessMonitor: logging media failed" in str(w.message)]
    assert len(ours) == 1 and "no space left on device" in str(ours[0].message)
    assert trainer.state.finished and trainer.current_epoch == 2
    run = read_run(offline)
    assert len(run.column("robustness/attack/saliency/topk/topk_intersection")) == 2
    assert run.column("robustness/attack/saliency/topk/examples/filenames") == []
