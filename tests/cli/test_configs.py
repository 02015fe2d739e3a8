"""Every shipped config (robust_train/assets/configs; configs/ in a checkout) parses, trains one
batch and validates one (embedded, synthetic or tiny data)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import wandb
import yaml

from robust_train.app.lightning_cli import lightning_main
from robust_train.core.resources import list_shipped, shipped_config
from tests.support.wandb_reader import read_run

CONFIGS = [shipped_config(name) for name in list_shipped("configs")]
SHORT = [
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=1",
    "--trainer.limit_val_batches=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]


def _tiny_image_folder(root: Path, size: int = 40, per_class: int = 4) -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "val", "test"):
        for cls in ("cat", "dog"):
            folder = root / split / cls
            folder.mkdir(parents=True)
            for i in range(per_class):
                Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)).save(
                    folder / f"{i}.png"
                )
    return root


def _override(config: Path, tmp_path: Path) -> list[str]:
    """Point configs that need external data at data the test creates."""
    data = yaml.safe_load(config.read_text())["data"]["class_path"]
    if data.endswith(("CIFAR10DataModule", "ClutteredMNIST5kDataModule")):
        # CIFAR-10 is not downloaded; cluttered MNIST-5k renders 5,000 images (tests/data)
        side = 64 if data.endswith("ClutteredMNIST5kDataModule") else 32
        override = {
            "data": {
                "class_path": "robust_train.data.SyntheticDataModule",
                "init_args": {
                    "num_samples": 16,  # 4 validation images for the monitor
                    "image_size": side,
                    "in_channels": 3,
                    "num_classes": 10,
                    "batch_size": 8,
                },
            },
            "trainer": {"precision": "32-true", "accelerator": "cpu"},
        }
    elif data.endswith("ImageFolderDataModule"):
        root = _tiny_image_folder(tmp_path / "images")
        override = {
            "data": {
                "class_path": "robust_train.data.ImageFolderDataModule",
                # batch 8: a penalty on a quarter of it still gives BatchNorm two images
                "init_args": {"root": str(root), "image_size": 32, "batch_size": 8},
            },
            "trainer": {"accelerator": "cpu"},
        }
    else:
        return []
    path = tmp_path / "override.yaml"
    path.write_text(yaml.safe_dump(override))
    return ["--config", str(path)]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_config_runs(config: Path, tmp_path: Path):
    args = [
        "--config",
        str(config),
        *_override(config, tmp_path),
        *SHORT,
        "--trainer.logger=false",
        "--checkpoint_root",
        str(tmp_path / "ckpt"),
    ]
    cli = lightning_main(args, run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    experiment = yaml.safe_load(config.read_text())["experiment"]
    last = tmp_path / "ckpt" / experiment / "latest" / "last.ckpt"
    assert last.is_file()
    assert (last.parent / "config.yaml").is_file()
    meta = torch.load(last, map_location="cpu", weights_only=False)["robust_train"]
    assert meta["model"]["class_path"].startswith("robust_train.models")
    assert meta["datamodule"]["class_path"].startswith("robust_train.data")
    assert not any(k.startswith("_") for k in meta["datamodule"]["init_args"])
    assert torch.isfinite(cli.trainer.callback_metrics["train/loss_epoch"])


def test_fit_subcommand_with_default_offline_wandb_logger(tmp_path: Path, cli):
    config = next(c for c in CONFIGS if c.stem == "digits_curvature")
    done = cli("fit", "--config", config, *SHORT, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    wandb.finish()  # the console script's process exit would do this
    assert (tmp_path / "checkpoints" / "digits_curvature" / "latest" / "last.ckpt").is_file()
    runs = list((tmp_path / "runs" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    run = read_run(runs[0])  # waits for W&B's writer to finish the file
    assert run.config["penalty_terms"] == ["Curvature(name='curvature', weight=0.01)"]
    assert run.config["model_class"] == "SmallCNN"
    assert any("train/loss_epoch" in row for row in run.history)


def test_unknown_penalty_class_is_a_clear_error(tmp_path: Path):
    config = next(c for c in CONFIGS if c.stem == "digits_smoothness")
    with pytest.raises(Exception, match="NoSuchPenalty"):
        lightning_main(
            [
                "--config",
                str(config),
                "--model.penalties",
                '[{"class_path": "robust_train.NoSuchPenalty"}]',
            ],
            run=False,
        )
