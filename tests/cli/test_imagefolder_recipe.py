"""configs/imagefolder_resnet18_every_map.yaml on a tiny generated image folder: two epochs of one
batch, so that the second (backbone unfrozen, penalty at full weight after its one-epoch warm-up)
trains the every-map penalty at the stated 8/255 radius. (tests/cli/test_configs.py runs every
config for one epoch.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from pytorch_lightning.callbacks import Checkpoint
from torchvision.transforms import v2

from robust_train.app.lightning_cli import lightning_main
from robust_train.core.resources import shipped_config
from robust_train.regularizers import MultiMapSmoothness
from tests.support.helpers import write_image_folder


@pytest.mark.slow
def test_every_map_recipe_trains_its_penalty_on_an_image_folder(tmp_path: Path):
    write_image_folder(tmp_path / "images", per_class=4)  # 2 x 5 RGB images, 20 x 20
    override = {
        "data": {
            "class_path": "robust_train.data.ImageFolderDataModule",
            "init_args": {
                "root": str(tmp_path / "images"),
                "image_size": 64,  # layer4 2 x 2: a Grad-CAM map with extent
                "batch_size": 8,
                "val_fraction": 0.2,
            },
        },
        "trainer": {"accelerator": "cpu", "callbacks": []},  # the monitor: test_configs.py
    }
    (tmp_path / "override.yaml").write_text(yaml.safe_dump(override))
    cli = lightning_main(
        [
            "--config", str(shipped_config("imagefolder_resnet18_every_map")),
            "--config", str(tmp_path / "override.yaml"),
            "--trainer.max_epochs=2", "--trainer.limit_train_batches=1",
            "--trainer.limit_val_batches=1", "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false", "--trainer.logger=false",
            "--model.lr_scheduler.init_args.T_max=2",
            "--checkpoint_root", str(tmp_path / "ckpt"),
        ],
        run=False,
    )  # fmt: skip
    (term,) = cli.model.terms
    assert isinstance(term, MultiMapSmoothness)
    assert abs(term.options.radius - 8 / 255) < 1e-9 and term.batch_fraction == 0.09
    assert term.options.n_ascent_steps == 1
    assert term.options.explainers == ("saliency", "input_x_gradient", "grad_cam")
    assert cli.datamodule.hparams["resize_mode"] == "pad"
    assert isinstance(cli.datamodule.train_transform, v2.ColorJitter)  # merged from the config
    stem = cli.model.model.backbone.conv1.weight.detach().clone()
    # no checkpoint files (a ResNet-18's take seconds to write; test_configs.py checks them)
    cli.trainer.callbacks = [c for c in cli.trainer.callbacks if not isinstance(c, Checkpoint)]
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    metrics = cli.trainer.callback_metrics
    assert cli.trainer.current_epoch == 2
    assert float(metrics["train/penalty/multi_map_epoch"]) > 0  # the second epoch's, at weight 1
    assert torch.isfinite(metrics["train/loss_epoch"])
    assert not torch.equal(stem, cli.model.model.backbone.conv1.weight)  # unfrozen in epoch 2
