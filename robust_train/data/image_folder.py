"""Your own images: `root/train/<class>/*.png`, optional `root/val/...` and `root/test/...`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch
from torch.utils.data import random_split
from torchvision import transforms
from torchvision.datasets import ImageFolder

from robust_train._validation import check_non_negative, check_probability
from robust_train.data._base import ImageDataModule, as_size

__all__ = ["ImageFolderDataModule"]


class _FixedClassesFolder(ImageFolder):
    """ImageFolder whose class indices come from the training folder, so that they agree across
    splits even when a val/test folder lacks a class."""

    def __init__(self, root: str, classes: list[str], transform: transforms.Compose):
        self._fixed = classes
        super().__init__(root, transform=transform, allow_empty=True)

    def find_classes(self, directory: str | os.PathLike[str]) -> tuple[list[str], dict[str, int]]:
        present = sorted(e.name for e in os.scandir(directory) if e.is_dir())
        unknown = sorted(set(present) - set(self._fixed))
        if unknown:
            raise ValueError(
                f"{str(directory)!r} has class folders {unknown} that the train folder lacks"
            )
        return list(self._fixed), {c: i for i, c in enumerate(self._fixed)}


class ImageFolderDataModule(ImageDataModule):
    """Images in class folders, resized to `image_size` and converted to [0, 1] tensors.

    Args:
        root: folder with `train/<class>/<images>`, and optionally `val/` and `test/` alike.
        image_size: an int (square) or (height, width) every image is resized to.
        batch_size: batch size of every dataloader.
        num_workers: dataloader workers.
        grayscale: convert to one channel (else RGB; alpha is dropped).
        val_fraction: share of `train/` held out (seeded) for validation when there is no `val/`.
        seed: seed of that split.

    Example:
        >>> import tempfile
        >>> from PIL import Image
        >>> root = Path(tempfile.mkdtemp())
        >>> for c in ("cat", "dog"):
        ...     (root / "train" / c).mkdir(parents=True)
        ...     for i in range(5):
        ...         Image.new("RGB", (10, 12)).save(root / "train" / c / f"{i}.png")
        >>> dm = ImageFolderDataModule(root, image_size=16, val_fraction=0.2)
        >>> dm.class_names, dm.in_channels, dm.image_size
        (['cat', 'dog'], 3, (16, 16))
        >>> dm.setup(); len(dm.train_set), len(dm.val_set), dm.train_set[0][0].shape
        (8, 2, torch.Size([3, 16, 16]))
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        image_size: int | Sequence[int] = 224,
        batch_size: int = 32,
        num_workers: int = 0,
        grayscale: bool = False,
        val_fraction: float = 0.1,
        seed: int = 0,
    ):
        super().__init__(batch_size, num_workers)
        self.save_hyperparameters()
        check_probability(val_fraction, "val_fraction")
        check_non_negative(seed, "seed", integer=True)
        self.root = Path(root).expanduser()
        self.hparams["root"] = str(root)  # plain values only, for YAML hparams and configs
        self.size: tuple[int, int] = as_size(image_size, "image_size") or (224, 224)
        self._classes: list[str] | None = None

    def _split_dir(self, split: str) -> Path:
        return self.root / split

    @property
    def class_names(self) -> list[str]:
        if self._classes is None:
            train = self._split_dir("train")
            if not train.is_dir():
                raise FileNotFoundError(
                    f"ImageFolderDataModule needs {str(train)!r} with one sub-folder of images "
                    "per class "
                    f"(and optionally {str(self._split_dir('val'))!r}, "
                    f"{str(self._split_dir('test'))!r})"
                )
            self._classes = sorted(e.name for e in os.scandir(train) if e.is_dir())
            if not self._classes:
                raise FileNotFoundError(f"{str(train)!r} has no class sub-folders")
        return list(self._classes)

    @property
    def in_channels(self) -> int:
        return 1 if self.hparams["grayscale"] else 3

    @property
    def image_size(self) -> tuple[int, int]:
        return self.size

    def _folder(self, split: str) -> ImageFolder:
        steps: list[object] = [transforms.Resize(self.size)]
        if self.hparams["grayscale"]:
            steps.append(transforms.Grayscale(num_output_channels=1))
        steps.append(transforms.ToTensor())
        return _FixedClassesFolder(
            str(self._split_dir(split)), self.class_names, transforms.Compose(steps)
        )

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        train = self._folder("train")
        if len(train) == 0:
            raise FileNotFoundError(f"no images found under {str(self._split_dir('train'))!r}")
        if self._split_dir("val").is_dir():
            self.train_set, self.val_set = train, self._folder("val")
        else:
            n_val = int(round(self.hparams["val_fraction"] * len(train)))
            if n_val < 1 or n_val >= len(train):
                raise ValueError(
                    f"val_fraction={self.hparams['val_fraction']} of {len(train)} training "
                    "images leaves an "
                    f"empty split; add {str(self._split_dir('val'))!r} or change val_fraction"
                )
            generator = torch.Generator().manual_seed(self.hparams["seed"])
            self.train_set, self.val_set = random_split(
                train, [len(train) - n_val, n_val], generator=generator
            )
        if self._split_dir("test").is_dir():
            self.test_set = self._folder("test")

    def test_dataloader(self):  # noqa: D102
        if self.train_set is not None and self.test_set is None:
            raise RuntimeError(f"no test split: {str(self._split_dir('test'))!r} does not exist")
        return super().test_dataloader()
