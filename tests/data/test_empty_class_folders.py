"""An image folder whose `train/` holds a class folder without images: every sub-folder is a
class, so the empty one would be a class no model can learn (and a 3-output model on 3 real
classes would fail mid-fit, "Target 3 is out of bounds"). It is refused, naming the folder, by the
data module, by `check-data` and by `fit` before training."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from robust_train.data import ImageFolderDataModule
from robust_train.data.check import check_datamodule

CONFIG = """\
experiment: folder
trainer: {{accelerator: cpu, devices: 1, max_epochs: 1, logger: {logger},
          enable_progress_bar: false, enable_model_summary: false}}
model:
  model:
    class_path: robust_train.models.SmallCNN
    init_args: {{in_channels: 3, num_classes: 3, input_size: 8}}
data:
  class_path: robust_train.data.ImageFolderDataModule
  init_args: {{root: images, image_size: 8, batch_size: 4, val_fraction: 0.25}}
"""


def _images(root: Path, counts: dict[str, int]) -> Path:
    for name, n in counts.items():
        folder = root / "train" / name
        folder.mkdir(parents=True)
        for i in range(n):
            Image.new("RGB", (8, 8), (60 * i, 0, 0)).save(folder / f"{i}.png")
    return root


def test_an_empty_class_folder_is_refused_naming_it(tmp_path: Path):
    from robust_train.data.image_folder import EmptyClassFolderError

    root = _images(tmp_path, {"cat": 4, "dog": 4, "emu": 4, "zebra": 0})
    (root / "train" / "zebra" / "notes.txt").write_text("not an image")
    dm = ImageFolderDataModule(root, image_size=8)
    with pytest.raises(EmptyClassFolderError, match=r"1 of the 4 class folders .* \['zebra'\]"):
        _ = dm.num_classes
    with pytest.raises(EmptyClassFolderError, match="zebra"):
        check_datamodule(dm)
    with pytest.raises(FileNotFoundError, match="no images found"):
        _ = ImageFolderDataModule(_images(tmp_path / "none", {"a": 0}), image_size=8).class_names


def test_images_in_sub_folders_of_a_class_count(tmp_path: Path):
    root = _images(tmp_path, {"cat": 3, "dog": 0})
    (root / "train" / "dog" / "nested").mkdir()
    Image.new("RGB", (8, 8)).save(root / "train" / "dog" / "nested" / "0.png")
    assert ImageFolderDataModule(root, image_size=8).class_names == ["cat", "dog"]


def test_check_data_and_fit_report_the_empty_class_folder(tmp_path: Path, cli):
    _images(tmp_path / "images", {"cat": 4, "dog": 4, "emu": 4, "yak": 0})
    (tmp_path / "cfg.yaml").write_text(CONFIG.format(logger="false"))
    done = cli("check-data", "--config", "cfg.yaml", cwd=tmp_path)
    assert done.returncode == 2
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("robust-train: error: ") and "['yak']" in line, line
    done = cli("fit", "--config", "cfg.yaml", cwd=tmp_path)
    assert done.returncode == 2
    err = done.stderr
    assert "['yak']" in err.strip().splitlines()[-1] and "out of bounds" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.yaml", "images"]  # nothing left
