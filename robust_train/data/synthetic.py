"""Random, learnable image data of any shape: smoke tests and speed benchmarks without files."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.data import TensorDataset

from robust_train.core.validation import (
    check_non_negative,
    check_positive_ints,
    check_probability,
)
from robust_train.data.base import ImageDataModule, as_size

__all__ = ["SyntheticDataModule"]


class SyntheticDataModule(ImageDataModule):
    """Images `clamp((1 - noise) * template[y] + noise * U(0, 1), 0, 1)`, one random template per
    class, so a classifier can learn them. Val and test hold `num_samples // 4` images each.

    Args:
        num_samples: training images.
        image_size: an int (square) or (height, width); 32 gives CIFAR-shaped data.
        in_channels: image channels.
        num_classes: classes (labels drawn uniformly).
        seed: seed of everything generated.
        batch_size: batch size of every dataloader.
        num_workers: dataloader workers.
        noise: weight of the per-image noise, in [0, 1] (1: labels carry no signal).

    Examples:
        >>> dm = SyntheticDataModule(num_samples=8, num_classes=3)
        >>> dm.setup(); x, y = dm.train_set[:]
        >>> tuple(x.shape), int(y.max()) < 3, bool(x.min() >= 0) and bool(x.max() <= 1)
        ((8, 3, 32, 32), True, True)
    """

    def __init__(
        self,
        num_samples: int = 512,
        image_size: int | Sequence[int] = 32,
        in_channels: int = 3,
        num_classes: int = 10,
        seed: int = 0,
        batch_size: int = 64,
        num_workers: int = 0,
        noise: float = 0.5,
    ):
        super().__init__(batch_size, num_workers)
        self.save_hyperparameters()
        check_positive_ints(
            num_samples=num_samples, in_channels=in_channels, num_classes=num_classes
        )
        check_non_negative(seed, "seed", integer=True)
        check_probability(noise, "noise")
        self.size: tuple[int, int] = as_size(image_size, "image_size") or (32, 32)

    @property
    def class_names(self) -> list[str]:
        return [f"class_{i}" for i in range(self.hparams["num_classes"])]

    @property
    def in_channels(self) -> int:
        return int(self.hparams["in_channels"])

    @property
    def image_size(self) -> tuple[int, int]:
        return self.size

    def _make(self, n: int, generator: torch.Generator, templates: torch.Tensor) -> TensorDataset:
        hp = self.hparams
        targets = torch.randint(0, hp["num_classes"], (n,), generator=generator)
        noise = torch.rand((n, hp["in_channels"], *self.size), generator=generator)
        images = ((1.0 - hp["noise"]) * templates[targets] + hp["noise"] * noise).clamp_(0.0, 1.0)
        return TensorDataset(images, targets)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        hp = self.hparams
        generator = torch.Generator().manual_seed(hp["seed"])
        templates = torch.rand(
            (hp["num_classes"], hp["in_channels"], *self.size), generator=generator
        )
        n_eval = max(1, hp["num_samples"] // 4)
        self.train_set = self._make(hp["num_samples"], generator, templates)
        self.val_set = self._make(n_eval, generator, templates)
        self.test_set = self._make(n_eval, generator, templates)
