"""Unreadable images: the error names the file, during training too (also from a DataLoader
worker); `verify` refuses the folder before any training, `skip_unreadable` drops the files with
a printed count, and `robust-train check-data --config ...` lists them (in a process of its own,
the warm console's, tests/support/warm_console.py, and through the console script's entry point
`robust_train.app.cli.main` in-process; tests/app runs the script itself)."""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from robust_train.data import ImageFolderDataModule, UnreadableImageError, check_datamodule
from tests.support.helpers import write_image_folder

BAD = ("cat/3.png", "dog/j.jpg")  # a truncated PNG and a truncated JPEG
CONFIG = """\
experiment: folder
trainer: {max_epochs: 1, accelerator: cpu, devices: 1, enable_progress_bar: false,
          enable_model_summary: false, logger: false}
model:
  model:
    class_path: robust_train.models.SmallCNN
    init_args: {in_channels: 3, num_classes: 2, input_size: 8}
data:
  class_path: robust_train.data.ImageFolderDataModule
  init_args: {root: images, image_size: 8, batch_size: 4, val_fraction: 0.25}
"""


@pytest.fixture
def folder(tmp_path: Path) -> tuple[Path, list[Path]]:
    return tmp_path, write_image_folder(tmp_path / "images", truncate=BAD)


def test_reading_a_truncated_image_names_the_file_also_from_a_worker(folder):
    root, bad = folder
    dm = ImageFolderDataModule(root / "images", image_size=8, val_fraction=0.25)
    dm.setup()
    dataset = dm.train_set.dataset  # the folder under the random split
    index = next(i for i, (path, _) in enumerate(dataset.samples) if path == str(bad[0]))
    with pytest.raises(UnreadableImageError, match="cannot read image .*cat/3.png"):
        dataset[index]
    loader = DataLoader(torch.utils.data.Subset(dataset, [index]), num_workers=1)
    with pytest.raises(UnreadableImageError) as caught:
        next(iter(loader))
    # The traceback's frames hold the loader's iterator: release it now, while its queues are
    # whole (stopped later, by a garbage collection, its worker took 5 s to join).
    traceback.clear_frames(caught.tb)
    assert str(caught.value).startswith(f"cannot read image {str(bad[0])!r}")
    assert "\n" not in str(caught.value)  # the worker's traceback is kept aside
    assert "Traceback" in (caught.value.worker_traceback or "")


def test_verify_refuses_and_skip_unreadable_drops_with_a_count(folder, capsys):
    root, bad = folder
    with pytest.raises(UnreadableImageError, match=r"2 of 14 images .* cannot be read"):
        ImageFolderDataModule(root / "images", image_size=8, verify=True).setup()
    dm = ImageFolderDataModule(root / "images", image_size=8, skip_unreadable=True)
    dm.setup()
    assert "skipped 2 unreadable image(s) of 14" in capsys.readouterr().err
    assert sorted(path for path, _ in dm.skipped) == sorted(map(str, bad))
    kept = [path for path, _ in dm.train_set.dataset.samples]
    assert len(kept) == 12 and not set(kept) & set(map(str, bad))
    for i in range(len(dm.train_set)):  # every image left reads
        assert dm.train_set[i][0].shape == (3, 8, 8)
    checks = check_datamodule(ImageFolderDataModule(root / "images", image_size=8))
    assert [(c.split, c.n_items) for c in checks] == [("train", 14)]
    assert sorted(name for name, _ in checks[0].unreadable) == sorted(map(str, bad))
    assert all("truncated" in reason for _, reason in checks[0].unreadable)


@pytest.mark.slow
def test_check_data_and_fit_through_the_console_script(folder, console, cli):
    root, bad = folder
    (root / "cfg.yaml").write_text(CONFIG)
    skip = ["--data.init_args.skip_unreadable", "true"]
    cases = {
        "check": ["check-data", "--config", "cfg.yaml"],
        "check_skip": ["check-data", "--config", "cfg.yaml", *skip],
        "fit": ["fit", "--config", "cfg.yaml"],
        "fit_skip": ["fit", "--config", "cfg.yaml", *skip, "--experiment", "skip"],
    }
    out = {  # a process of its own once (the warm console's); the other cases in-process
        k: (console if k == "check" else cli)(*args, cwd=root) for k, args in cases.items()
    }

    check = out["check"]
    assert check.returncode == 2, check.stderr[-2000:]
    for path in BAD:  # every unreadable file listed, with its reason
        assert f"unreadable: images/train/{path}: OSError: image file is truncated" in check.stdout
    assert "ImageFolderDataModule train: 14 items, 2 unreadable" in check.stdout
    assert check.stderr.strip().splitlines()[-1] == (
        "robust-train: error: 2 of 14 items of ImageFolderDataModule cannot be read (listed "
        "above); fix or remove them, or set data.init_args.skip_unreadable: true"
    )
    assert out["check_skip"].returncode == 0, out["check_skip"].stderr[-2000:]
    assert "the fit skips them" in out["check_skip"].stdout

    fit = out["fit"]
    assert fit.returncode == 2, fit.stderr[-2000:]
    errors = [line for line in fit.stderr.splitlines() if line.startswith("robust-train: error")]
    assert len(errors) == 1 and "cannot read image 'images/train/" in errors[0], fit.stderr[-2000:]
    assert "Traceback" not in fit.stderr
    assert not (root / "checkpoints" / "folder").exists()  # the failed fit left no run folder

    fitted = out["fit_skip"]
    assert fitted.returncode == 0, fitted.stderr[-2000:]
    assert "skipped 2 unreadable image(s) of 14" in fitted.stderr
    assert (root / "checkpoints" / "skip" / "latest" / "last.ckpt").is_file()
