"""Data that does not fit the model is refused before any work.

One probe forward on one image of the data's shape: a 3-class checkpoint on MNIST (10 classes),
the shipped 28x28 MNIST model on the 8x8 digits, an RGB model on grey images and a user's data
module that declares no shape. Each exits 2 with one line naming the model's side and the data's
side, and writes no results.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from robust_train.app.lightning_cli import lightning_main
from robust_train.core.resources import shipped_checkpoint
from robust_train.models import TorchvisionClassifier, model_config

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
FAST = ["--n-samples", "4", "--n-steps", "2", "--explainers", "saliency", "--no-progress"]
FAST += ["--no-ensemble"]
THREE_CLASSES = """
seed_everything: 0
trainer: {max_epochs: 1, limit_train_batches: 2, limit_val_batches: 1, logger: false,
          enable_progress_bar: false, enable_model_summary: false, callbacks: []}
model:
  model:
    class_path: robust_train.models.MNISTConvNet
    init_args: {num_classes: 3, channels: [4, 8], hidden: 16}
data:
  class_path: robust_train.data.SyntheticDataModule
  init_args: {num_samples: 32, image_size: 28, in_channels: 1, num_classes: 3, batch_size: 16}
"""
SHAPELESS_DATA = '''
import torch
import pytorch_lightning as pl
from torch.utils.data import DataLoader, TensorDataset


class Shapeless(pl.LightningDataModule):
    """A user's data module: 1x12x12 images, declares neither shape nor classes."""

    def test_dataloader(self):
        return DataLoader(TensorDataset(torch.rand(8, 1, 12, 12), torch.zeros(8).long()), 4)
'''


def _fit_three_class(root: Path) -> Path:
    """A real `fit` (Lightning, one short epoch) of a 3-class 28x28 model."""
    root.mkdir()
    config = root / "three.yaml"
    config.write_text(THREE_CLASSES)
    cli = lightning_main(["--config", str(config), "--checkpoint_root", str(root)], run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    (ckpt,) = root.glob("*/version_0/last.ckpt")
    return ckpt


def _rgb_checkpoint(path: Path) -> Path:
    """An RGB TorchvisionClassifier in the layout `robust-train export` writes."""
    net = TorchvisionClassifier("resnet18", num_classes=10)
    torch.save(
        {
            "state_dict": {f"model.{k}": v for k, v in net.state_dict().items()},
            "robust_train": {"model": model_config(net), "num_classes": 10, "datamodule": None},
        },
        path,
    )
    return path


def _one_line(result) -> str:
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("robust-train: error: "), result.stderr[-2000:]
    return line


@pytest.mark.slow
def test_wrong_classes_size_and_channels_are_refused_naming_both(
    tmp_path: Path, console, cli, monkeypatch
):
    three = _fit_three_class(tmp_path / "fit")
    rgb = _rgb_checkpoint(tmp_path / "rgb.ckpt")
    (tmp_path / "shapeless.py").write_text(SHAPELESS_DATA)
    (tmp_path / "grey.yaml").write_text(
        "data:\n  class_path: robust_train.data.SyntheticDataModule\n"
        "  init_args: {num_samples: 16, image_size: 32, in_channels: 1, num_classes: 10}\n"
    )
    (tmp_path / "shapeless.yaml").write_text("data: {class_path: shapeless.Shapeless}\n")
    mnist = str(CONFIGS / "mnist5k_baseline.yaml")
    shipped = str(shipped_checkpoint("mnist5k_baseline"))
    cases = {  # name -> (checkpoint, data config, fragments of the one line)
        "classes": (three, mnist, ("has 3 outputs", "MNIST5kDataModule) has 10 classes")),
        "size": (shipped, str(CONFIGS / "digits_baseline.yaml"), ("1x28x28", "gives 1x8x8")),
        "channels": (rgb, "grey.yaml", ("3 channel(s)", "gives 1x32x32")),
        "shapeless": (shipped, "shapeless.yaml", ("1x28x28", "1x12x12")),
    }
    # A process of its own for one case (the warm console's, with PYTHONPATH); the others
    # through the script's entry point in-process, with the working directory on sys.path as
    # PYTHONPATH "." puts it there.
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "shapeless", raising=False)
    done = {}
    for name, (ckpt, data, _) in cases.items():
        args = ["evaluate", "--ckpt", str(ckpt), "--data-config", data, "--out", name]
        if name == "classes":
            done[name] = console(
                *args, "--no-wandb", *FAST, cwd=tmp_path, env={"PYTHONPATH": _path()}
            )
        else:
            done[name] = cli(*args, "--no-wandb", *FAST, cwd=tmp_path)
    monkeypatch.delitem(sys.modules, "shapeless", raising=False)
    for name, (_, _, fragments) in cases.items():
        line = _one_line(done[name])
        assert all(f in line for f in fragments), (name, line)
        assert not (tmp_path / name).exists(), name
    assert "Normalize holds" not in _one_line(done["channels"])


def _path() -> str:
    """PYTHONPATH with the working directory (the user's data module) after the package."""
    import os

    return os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), ".") if p)


def test_a_fitting_model_and_data_still_evaluate(tmp_path: Path, cli):
    """The control: the shipped digits model on its own data passes the probe."""
    done = cli(
        "evaluate", "--ckpt", str(shipped_checkpoint("digits_baseline")),
        "--data-config", str(CONFIGS / "digits_baseline.yaml"), "--out", "ok", "--no-wandb",
        *FAST, "--attacks", "topk", "--parts", "fragility", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "ok" / "results.json").is_file()
