"""Shared parts of the DataModules: dataloaders, image tensors in [0, 1], resizing, and the
held-out subset selector (`heldout_rows`: a seeded random subset, or a seeded class-stratified
one taken in `stratified_order`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import pytorch_lightning as pl
import torch
from torch import Tensor
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset

from robust_train.core.validation import check_choice, check_non_negative, check_positive

__all__ = [
    "DigitImagesDataModule",
    "GreyDigitsDataModule",
    "ImageDataModule",
    "ImageTensorDataset",
    "as_size",
    "SUBSET_MODES",
    "dataset_targets",
    "heldout_rows",
    "resize_images",
    "stratified_order",
]


def as_size(size: int | Sequence[int] | None, name: str = "resize") -> tuple[int, int] | None:
    """None, an int (square) or (height, width) -> None or (height, width), validated."""
    if size is None:
        return None
    if isinstance(size, int) and not isinstance(size, bool):
        pair = (size, size)
    elif isinstance(size, Sequence) and len(size) == 2:
        pair = (size[0], size[1])
    else:
        raise ValueError(f"`{name}` must be None, an int or (height, width), got {size!r}")
    for side in pair:
        check_positive(side, name, integer=True)
    return (int(pair[0]), int(pair[1]))


def resize_images(images: Tensor, size: tuple[int, int] | None) -> Tensor:
    """Bilinear resize of float images (N, C, H, W) in [0, 1] (antialiased when shrinking)."""
    if size is None or tuple(images.shape[-2:]) == size:
        return images
    shrink = size[0] < images.shape[-2] or size[1] < images.shape[-1]
    out = F.interpolate(images, size=size, mode="bilinear", align_corners=False, antialias=shrink)
    return out.clamp_(0.0, 1.0)


class ImageTensorDataset(Dataset):
    """(image, label) pairs from a tensor of images (N, C, H, W), uint8 (0..255) or float in
    [0, 1]; items are float32 in [0, 1], resized on access when `size` is given."""

    def __init__(self, images: Tensor, targets: Tensor, size: tuple[int, int] | None = None):
        if images.dim() != 4 or len(images) != len(targets):
            raise ValueError(
                f"images {tuple(images.shape)} and targets {tuple(targets.shape)} do not match"
            )
        self.images = images
        self.targets = targets.long()
        self.size = size

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        image = self.images[index]
        image = image.float() / 255.0 if image.dtype == torch.uint8 else image.float()
        if self.size is not None:
            image = resize_images(image.unsqueeze(0), self.size).squeeze(0)
        return image, self.targets[index]


class ImageDataModule(pl.LightningDataModule):
    """Base class: `train_set`/`val_set`/`test_set` made by `setup`, and their dataloaders.

    Subclasses call `self.save_hyperparameters()` and define `num_classes`, `in_channels`,
    `image_size` (height, width) and `class_names`, all usable before `setup`.
    """

    def __init__(self, batch_size: int, num_workers: int):
        super().__init__()
        check_positive(batch_size, "batch_size", integer=True)
        check_non_negative(num_workers, "num_workers", integer=True)
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def class_names(self) -> list[str]:
        raise NotImplementedError

    @property
    def in_channels(self) -> int:
        raise NotImplementedError

    @property
    def image_size(self) -> tuple[int, int]:
        raise NotImplementedError

    def _loader(self, dataset: Dataset | None, split: str, shuffle: bool) -> DataLoader:
        if dataset is None:
            raise RuntimeError(
                f"{type(self).__name__} has no {split} split yet: call setup() first"
            )
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, "train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, "val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, "test", shuffle=False)


class DigitImagesDataModule(ImageDataModule):
    """Digit images: ten classes named "0" to "9", with `channels` channels."""

    channels: ClassVar[int] = 1

    @property
    def class_names(self) -> list[str]:
        return [str(i) for i in range(10)]

    @property
    def in_channels(self) -> int:
        return self.channels


class GreyDigitsDataModule(DigitImagesDataModule):
    """Grey digit images (one channel: the digits and MNIST data)."""


def dataset_targets(dataset: Any) -> Tensor | None:
    """The labels of every item of `dataset`, read without decoding an image: `targets` of
    ImageTensorDataset and torchvision's ImageFolder, the label tensor of a TensorDataset, through
    `Subset`s (such as `random_split`'s); None when the dataset does not hold them apart.

    Examples:
        >>> from torch.utils.data import Subset, TensorDataset
        >>> data = TensorDataset(torch.zeros(4, 1, 2, 2), torch.tensor([3, 1, 2, 0]))
        >>> dataset_targets(Subset(data, [2, 0])).tolist()
        [2, 3]
    """
    if isinstance(dataset, Subset):
        inner = dataset_targets(dataset.dataset)
        return None if inner is None else inner[torch.as_tensor(list(dataset.indices))]
    if isinstance(dataset, TensorDataset) and len(dataset.tensors) >= 2:
        return torch.as_tensor(dataset.tensors[1]).long().flatten()
    targets = getattr(dataset, "targets", None)
    if targets is None:
        return None
    labels = torch.as_tensor(targets).long().flatten()
    return labels if len(labels) == len(dataset) else None


def stratified_order(targets: Tensor, seed: int = 0) -> Tensor:
    """Indices of all items in a seeded order whose every prefix is class-stratified: the first
    n hold each class in proportion to its share of `targets` (within one item).

    Each class's items are shuffled with `seed`; the r-th item of a class of size m is placed at
    the fraction (r + 1/2) / m, and the items are sorted by it (classes interleave evenly).

    Examples:
        >>> targets = torch.tensor([0] * 6 + [1] * 3 + [2] * 3)
        >>> order = stratified_order(targets)
        >>> torch.bincount(targets[order[:4]], minlength=3).tolist()
        [2, 1, 1]
        >>> sorted(order.tolist()) == list(range(12))
        True
    """
    targets = torch.as_tensor(targets).long().flatten()
    generator = torch.Generator().manual_seed(int(seed))
    keys = torch.empty(len(targets), dtype=torch.float64)
    for label in torch.unique(targets):
        members = (targets == label).nonzero().flatten()
        shuffled = members[torch.randperm(len(members), generator=generator)]
        ranks = torch.arange(len(members), dtype=torch.float64)
        keys[shuffled] = (ranks + 0.5) / len(members)
    # ties (same fraction in several classes) go to the smaller class index, then the position
    tie = targets.double() / (float(targets.max()) + 2.0 if len(targets) else 1.0) * 1e-9
    return torch.argsort(keys + tie, stable=True)


SUBSET_MODES = ("random", "stratified")


def heldout_rows(
    n_samples: int,
    seed: int,
    *,
    mode: str,
    size: int | None = None,
    targets: Tensor | None = None,
) -> Tensor:
    """The rows of a held-out subset of `n_samples` items (all of them when there are fewer).

    Two ways to choose, both seeded:

    - "random": the first `n_samples` of a seeded permutation of the `size` rows, returned in
      data order (the monitors' fixed images).
    - "stratified": the first `n_samples` of `stratified_order(targets, seed)`, in that order:
      every class in proportion to its share, and a larger `n_samples` extends a smaller one
      (the images `evaluate`, `compare` and `certify` measure).

    Args:
        n_samples: rows wanted (>= 0).
        seed: seed of the choice.
        mode: "random" or "stratified".
        size: number of rows to choose from (default: `len(targets)`).
        targets: class labels of the rows; needed for "stratified".

    Returns:
        A LongTensor of row indices.

    Raises:
        ValueError: an unknown `mode`, "stratified" without `targets`, or neither `size` nor
            `targets`.

    Examples:
        >>> heldout_rows(3, 0, mode="random", size=10).tolist() == sorted(
        ...     torch.randperm(10, generator=torch.Generator().manual_seed(0))[:3].tolist())
        True
        >>> labels = torch.tensor([0, 0, 0, 0, 1, 1])
        >>> torch.bincount(labels[heldout_rows(3, 0, mode="stratified", targets=labels)]).tolist()
        [2, 1]
    """
    check_choice(mode, "mode", SUBSET_MODES)
    check_non_negative(n_samples, "n_samples", integer=True)
    if mode == "stratified":
        if targets is None:
            raise ValueError("`targets` are needed for a stratified subset (mode='stratified')")
        return stratified_order(targets, seed)[:n_samples]
    if size is None:
        if targets is None:
            raise ValueError("`size` or `targets` must be given to choose rows")
        size = len(targets)
    order = torch.randperm(size, generator=torch.Generator().manual_seed(seed))
    return order[:n_samples].sort().values
