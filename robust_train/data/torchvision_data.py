"""MNIST, Fashion-MNIST and CIFAR-10 through torchvision's file readers.

The images stay uint8 in memory and become float in [0, 1] per item. When the files are absent
the error names the exact folder torchvision reads and how to provide the files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
import torchvision
from torch import Tensor

from robust_train.core.validation import check_non_negative, check_positive
from robust_train.data.base import ImageDataModule, ImageTensorDataset, as_size

__all__ = ["MNISTDataModule", "FashionMNISTDataModule", "CIFAR10DataModule"]

CIFAR10_CLASSES = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
]


class _TorchvisionDataModule(ImageDataModule):
    """Train (minus a seeded validation part) / val / test from a torchvision dataset class."""

    dataset_cls: ClassVar[type]
    native_size: ClassVar[tuple[int, int]]
    channels: ClassVar[int]
    names: ClassVar[list[str]]

    def __init__(
        self,
        data_dir: str = "data",
        download: bool = False,
        batch_size: int = 128,
        val_size: int = 5000,
        seed: int = 0,
        num_workers: int = 0,
        resize: int | Sequence[int] | None = None,
        subset: int | None = None,
    ):
        super().__init__(batch_size, num_workers)
        self.save_hyperparameters()
        check_non_negative(val_size, "val_size", integer=True)
        check_non_negative(seed, "seed", integer=True)
        if subset is not None:
            check_positive(subset, "subset", integer=True)
        self.data_dir = Path(data_dir).expanduser()
        self.download = bool(download)
        self.resize = as_size(resize)

    @property
    def class_names(self) -> list[str]:
        return list(self.names)

    @property
    def in_channels(self) -> int:
        return self.channels

    @property
    def image_size(self) -> tuple[int, int]:
        return self.resize or self.native_size

    # -- files --------------------------------------------------------------------------------
    def data_folder(self) -> Path:
        """The folder torchvision reads the files from."""
        raise NotImplementedError

    def expected_files(self) -> list[str]:
        raise NotImplementedError

    def _how_to_provide(self) -> str:
        return (
            f"Pass download=True (needs internet) to download them there, or copy the files "
            f"{self.expected_files()} into {str(self.data_folder())!r}."
        )

    def _open(self, train: bool) -> Any:
        try:
            return self.dataset_cls(str(self.data_dir), train=train, download=False)
        except RuntimeError as err:
            raise FileNotFoundError(
                f"{self.dataset_cls.__name__} files not found (or not intact) in "
                f"{str(self.data_folder())!r} (data_dir={str(self.data_dir)!r}). "
                f"{self._how_to_provide()}"
            ) from err

    def prepare_data(self) -> None:
        if not self.download:
            return
        try:
            self.dataset_cls(str(self.data_dir), train=True, download=True)
            self.dataset_cls(str(self.data_dir), train=False, download=True)
        except Exception as err:
            raise RuntimeError(
                f"Downloading {self.dataset_cls.__name__} into {str(self.data_folder())!r} failed "
                f"({type(err).__name__}: {err}). Offline, copy the files {self.expected_files()} "
                f"into {str(self.data_folder())!r} and use download=False."
            ) from err

    @staticmethod
    def _as_images(dataset: Any) -> tuple[Tensor, Tensor]:
        data = torch.as_tensor(dataset.data)
        images = data.unsqueeze(1) if data.dim() == 3 else data.permute(0, 3, 1, 2)
        return images.contiguous(), torch.as_tensor(dataset.targets, dtype=torch.long)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        if self.download:
            self.prepare_data()
        hp = self.hparams
        train_images, train_targets = self._as_images(self._open(train=True))
        test_images, test_targets = self._as_images(self._open(train=False))
        if hp["val_size"] >= len(train_images):
            raise ValueError(
                f"`val_size` {hp['val_size']} must be smaller than the {len(train_images)} "
                "training images"
            )
        order = torch.randperm(
            len(train_images), generator=torch.Generator().manual_seed(hp["seed"])
        )
        val_idx, train_idx = order[: hp["val_size"]], order[hp["val_size"] :]
        n = hp["subset"]
        self.train_set = ImageTensorDataset(
            train_images[train_idx[:n]], train_targets[train_idx[:n]], self.resize
        )
        self.val_set = ImageTensorDataset(
            train_images[val_idx[:n]], train_targets[val_idx[:n]], self.resize
        )
        self.test_set = ImageTensorDataset(test_images[:n], test_targets[:n], self.resize)


class MNISTDataModule(_TorchvisionDataModule):
    """MNIST handwritten digits (28x28 gray, 10 classes), read from `<data_dir>/MNIST/raw`.

    Args:
        data_dir: root folder (torchvision layout below it).
        download: download the files when absent (needs internet).
        batch_size: batch size of every dataloader.
        val_size: images taken (seeded) from the training set for validation.
        seed: seed of that split.
        num_workers: dataloader workers.
        resize: None, an int or (height, width): bilinear resize.
        subset: keep only the first `subset` images of each split (smoke tests).

    Examples:
        >>> dm = MNISTDataModule(data_dir="data")
        >>> dm.num_classes, dm.in_channels, dm.image_size
        (10, 1, (28, 28))
    """

    dataset_cls = torchvision.datasets.MNIST
    native_size = (28, 28)
    channels = 1
    names = [str(i) for i in range(10)]

    def data_folder(self) -> Path:
        return self.data_dir / self.dataset_cls.__name__ / "raw"

    def expected_files(self) -> list[str]:
        return [os.path.splitext(name)[0] for name, _ in self.dataset_cls.resources]


class FashionMNISTDataModule(MNISTDataModule):
    """Fashion-MNIST (28x28 gray, 10 clothing classes), read from `<data_dir>/FashionMNIST/raw`.

    Arguments as `MNISTDataModule`.

    Examples:
        >>> FashionMNISTDataModule().class_names[:2]
        ['T-shirt/top', 'Trouser']
    """

    dataset_cls = torchvision.datasets.FashionMNIST
    names = list(torchvision.datasets.FashionMNIST.classes)


class CIFAR10DataModule(_TorchvisionDataModule):
    """CIFAR-10 (32x32 RGB, 10 classes), read from `<data_dir>/cifar-10-batches-py`.

    torchvision checks the md5 sum of every batch file. Arguments as `MNISTDataModule`.

    Examples:
        >>> CIFAR10DataModule().image_size
        (32, 32)
    """

    dataset_cls = torchvision.datasets.CIFAR10
    native_size = (32, 32)
    channels = 3
    names = CIFAR10_CLASSES

    def data_folder(self) -> Path:
        return self.data_dir / self.dataset_cls.base_folder

    def expected_files(self) -> list[str]:
        cls = self.dataset_cls
        return [name for name, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]

    def _how_to_provide(self) -> str:
        return (
            super()._how_to_provide()
            + f" (the python version; or put {self.dataset_cls.filename!r} "
            f"in {str(self.data_dir)!r} and use download=True, which then only extracts it)"
        )
