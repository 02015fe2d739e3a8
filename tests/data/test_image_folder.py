"""ImageFolderDataModule on tiny PNGs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from robust_train.data import ImageFolderDataModule

RED, BLUE = (255, 0, 0), (0, 0, 255)


def _write(folder: Path, color: tuple[int, int, int], n: int, size=(10, 12)) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.new("RGB", size, color).save(folder / f"{i}.png")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    _write(tmp_path / "train" / "apple", RED, 3)
    _write(tmp_path / "train" / "berry", BLUE, 3, size=(7, 7))
    _write(tmp_path / "val" / "apple", RED, 1)
    _write(tmp_path / "val" / "berry", BLUE, 1)
    _write(tmp_path / "test" / "berry", BLUE, 2)  # a split without one of the classes
    return tmp_path


def test_images_are_resized_tensors_in_unit_range_with_consistent_labels(root):
    dm = ImageFolderDataModule(root, image_size=(8, 12), batch_size=4)
    assert (dm.class_names, dm.num_classes, dm.in_channels, dm.image_size) == (
        ["apple", "berry"],
        2,
        3,
        (8, 12),
    )
    dm.setup()
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (6, 2, 2)
    x, y = next(iter(dm.test_dataloader()))
    assert x.shape == (2, 3, 8, 12) and x.dtype == torch.float32
    assert y.tolist() == [1, 1]  # "berry" keeps the index the train folder gives it
    # 7x7 berries into 8 x 12: scaled to 8 x 8 and padded (the default), not stretched
    torch.testing.assert_close(x[0, :, 4, 6], torch.tensor([0.0, 0.0, 1.0]))
    torch.testing.assert_close(x[0, :, :, :2], torch.zeros(3, 8, 2))
    square = ImageFolderDataModule(root, image_size=16, batch_size=6)
    square.setup()
    train_x, train_y = next(iter(square.train_dataloader()))
    assert train_x.shape == (6, 3, 16, 16) and sorted(train_y.tolist()) == [0, 0, 0, 1, 1, 1]


def test_grayscale_uses_luma(root):
    dm = ImageFolderDataModule(root, image_size=8, grayscale=True)
    dm.setup()
    image, label = dm.train_set[0]
    assert dm.in_channels == 1 and image.shape == (1, 8, 8) and label == 0
    assert image[0, 0, 0].item() == pytest.approx(round(0.299 * 255) / 255, abs=1 / 255)


def test_validation_split_from_train_when_no_val_folder(tmp_path):
    _write(tmp_path / "train" / "a", RED, 5)
    _write(tmp_path / "train" / "b", BLUE, 5)
    dm = ImageFolderDataModule(tmp_path, image_size=4, val_fraction=0.3, seed=1)
    dm.setup()
    assert (len(dm.train_set), len(dm.val_set)) == (7, 3)
    again = ImageFolderDataModule(tmp_path, image_size=4, val_fraction=0.3, seed=1)
    again.setup()
    assert dm.val_set.indices == again.val_set.indices
    with pytest.raises(RuntimeError, match="no test split.*test"):
        dm.test_dataloader()
    with pytest.raises(ValueError, match="empty split"):
        ImageFolderDataModule(tmp_path, image_size=4, val_fraction=0.01).setup()


def test_missing_and_inconsistent_folders(tmp_path, root):
    with pytest.raises(FileNotFoundError, match="nowhere.*train"):
        _ = ImageFolderDataModule(tmp_path / "nowhere").class_names
    _write(root / "val" / "cherry", RED, 1)
    with pytest.raises(ValueError, match="cherry"):
        ImageFolderDataModule(root, image_size=4).setup()
