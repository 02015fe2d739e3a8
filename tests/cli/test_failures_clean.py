"""A failed or empty fit leaves nothing behind, with the default W&B logger (offline) through
the console script (the successful fit in a subprocess, the empty one in a process of the warm
console, the others through its entry point `robust_train.app.cli.main` in-process): no run
folder, no empty checkpoints/ or runs/, no W&B run and no dangling runs/wandb/debug*.log links,
whether the fit fails at setup (empty image folder), at the first step (non-finite loss), at fit
start (a monitor's k too large), mid-epoch (a truncated image) or trains nothing
(`--trainer.max_epochs 0`). A fit that saved a checkpoint keeps everything, and folders that
existed before are kept."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.helpers import write_image_folder

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
DIGITS = ["--config", str(CONFIGS / "digits_baseline.yaml")]
TINY = [
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1",
    "--trainer.enable_progress_bar=false",
]
FOLDER_CONFIG = """\
experiment: folder
trainer: {accelerator: cpu, devices: 1, enable_model_summary: false}
model:
  model:
    class_path: robust_train.models.SmallCNN
    init_args: {in_channels: 3, num_classes: 2, input_size: 8}
data:
  class_path: robust_train.data.ImageFolderDataModule
  init_args: {root: images, image_size: 8, batch_size: 4, val_fraction: 0.25}
"""
BIG_K = """\
trainer:
  callbacks:
    - class_path: robust_train.callbacks.RobustnessMonitor
      init_args: {k: 1000}
"""


def _everything(folder: Path) -> list[str]:
    """Every path under `folder` (links included, dangling or not), but the inputs."""
    inputs = {"images", "cfg.yaml", "k.yaml"}
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.relative_to(folder).parts[0] not in inputs
    )


@pytest.mark.slow
def test_failed_and_empty_fits_leave_nothing(tmp_path: Path, console, cli):
    cases = {
        "empty_folder": ["--config", "cfg.yaml", *TINY],
        "nonfinite": [*DIGITS, *TINY, "--model.optimizer.init_args.lr=1e12"],
        "monitor_k": [*DIGITS, "--config", "k.yaml", *TINY],
        "corrupt_image": ["--config", "cfg.yaml", *TINY],
        "max_epochs_0": [*DIGITS, "--trainer.max_epochs=0", "--trainer.enable_progress_bar=false"],
        "kept_folders": [*DIGITS, *TINY, "--model.optimizer.init_args.lr=1e12"],
        "success": [*DIGITS, *TINY],
    }
    sandboxes = {name: tmp_path / name for name in cases}
    for folder in sandboxes.values():
        folder.mkdir()
    for name in ("empty_folder", "corrupt_image"):
        (sandboxes[name] / "cfg.yaml").write_text(FOLDER_CONFIG)
    (sandboxes["empty_folder"] / "images" / "train" / "cat").mkdir(parents=True)
    write_image_folder(sandboxes["corrupt_image"] / "images", truncate=("cat/3.png", "dog/j.jpg"))
    (sandboxes["monitor_k"] / "k.yaml").write_text(BIG_K)
    for existing in ("runs/wandb", "checkpoints"):  # empty folders the user already had
        (sandboxes["kept_folders"] / existing).mkdir(parents=True)
    # The successful fit and the empty one in processes of their own, the warm console's (the
    # empty fit's message is a Lightning info line, whose logging state earlier in-process tests
    # can change); the other fits in-process.
    runner = {"success": console, "max_epochs_0": console}
    out = {
        name: runner.get(name, cli)("fit", *args, cwd=sandboxes[name])
        for name, args in cases.items()
    }

    expected = {
        "empty_folder": "no images found under 'images/train'",
        "nonfinite": "non-finite loss",
        "monitor_k": "`k` must be an int in [1, H*W] = [1, 64]",
        "corrupt_image": "cannot read image 'images/train/",
    }
    for name, fragment in expected.items():
        result = out[name]
        assert result.returncode == 2, (name, result.stderr[-2000:])
        assert fragment in result.stderr.strip().splitlines()[-1], (name, result.stderr[-2000:])
        assert _everything(sandboxes[name]) == [], name
    empty = out["max_epochs_0"]
    assert empty.returncode == 0, empty.stderr[-2000:]
    assert "The fit ran no training step" in empty.stderr + empty.stdout
    assert _everything(sandboxes["max_epochs_0"]) == []

    assert out["kept_folders"].returncode == 2
    assert _everything(sandboxes["kept_folders"]) == ["checkpoints", "runs", "runs/wandb"]

    done = sandboxes["success"]
    assert out["success"].returncode == 0, out["success"].stderr[-2000:]
    run = done / "checkpoints" / "digits_baseline" / "version_0"
    assert sorted(p.name for p in run.iterdir()) == ["best.ckpt", "config.yaml", "last.ckpt"]
    wandb = done / "runs" / "wandb"
    assert len(list(wandb.glob("offline-run-*"))) == 1
    assert all(link.exists() for link in wandb.iterdir() if link.is_symlink())
    shutil.rmtree(done)
