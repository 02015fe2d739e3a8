"""scikit-learn's bundled 8x8 handwritten digits: the embedded default dataset (no download)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.utils.data import TensorDataset

from robust_train.core.validation import check_non_negative, check_probability
from robust_train.data.base import GreyDigitsDataModule, as_size, resize_images

__all__ = ["DigitsDataModule", "load_digits_tensors"]


def load_digits_tensors() -> tuple[Tensor, Tensor]:
    """All 1797 digits as images in [0, 1] (pixel counts 0..16 divided by 16), shape
    (1797, 1, 8, 8), and their labels (1797,)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    return images, torch.tensor(digits.target, dtype=torch.long)


class DigitsDataModule(GreyDigitsDataModule):
    """The UCI handwritten digits bundled with scikit-learn (1797 images, 8x8, 10 classes).

    A fixed, seeded, stratified split into train / val / test (TensorDatasets held in memory).

    Args:
        batch_size: batch size of every dataloader.
        val_fraction: share of all images used for validation.
        test_fraction: share of all images used for testing.
        seed: seed of the split.
        resize: None (8x8), an int or (height, width): bilinear resize, e.g. 28 or 32.
        num_workers: dataloader workers.

    Examples:
        >>> dm = DigitsDataModule()
        >>> dm.setup()
        >>> len(dm.train_set), len(dm.val_set), len(dm.test_set)
        (1167, 270, 360)
        >>> next(iter(dm.test_dataloader()))[0].shape
        torch.Size([64, 1, 8, 8])
    """

    def __init__(
        self,
        batch_size: int = 64,
        val_fraction: float = 0.15,
        test_fraction: float = 0.2,
        seed: int = 0,
        resize: int | Sequence[int] | None = None,
        num_workers: int = 0,
    ):
        super().__init__(batch_size, num_workers)
        self.save_hyperparameters()
        for value, name in ((val_fraction, "val_fraction"), (test_fraction, "test_fraction")):
            check_probability(value, name)
            if not 0 < value < 1:
                raise ValueError(f"`{name}` must lie in (0, 1), got {value!r}")
        if val_fraction + test_fraction >= 1:
            raise ValueError(
                "`val_fraction` + `test_fraction` must be < 1, got "
                f"{val_fraction!r} + {test_fraction!r}"
            )
        check_non_negative(seed, "seed", integer=True)
        self.resize = as_size(resize)

    @property
    def image_size(self) -> tuple[int, int]:
        return self.resize or (8, 8)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        from sklearn.model_selection import train_test_split

        images, targets = load_digits_tensors()
        images = resize_images(images, self.resize)
        hp = self.hparams
        index = torch.arange(len(targets)).numpy()
        rest, test = train_test_split(
            index, test_size=hp["test_fraction"], stratify=targets.numpy(), random_state=hp["seed"]
        )
        val_share = hp["val_fraction"] / (1.0 - hp["test_fraction"])
        train, val = train_test_split(
            rest, test_size=val_share, stratify=targets.numpy()[rest], random_state=hp["seed"]
        )
        split = {"train": train, "val": val, "test": test}
        sets = {
            k: TensorDataset(images[torch.as_tensor(v)], targets[torch.as_tensor(v)])
            for k, v in split.items()
        }
        self.train_set, self.val_set, self.test_set = sets["train"], sets["val"], sets["test"]
