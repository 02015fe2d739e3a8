"""DigitsDataModule against scikit-learn's load_digits."""

from __future__ import annotations

import pytest
import torch
from sklearn.datasets import load_digits
from torchvision.transforms.functional import InterpolationMode, resize

from robust_train.data import DigitsDataModule


def _rows(dataset) -> torch.Tensor:
    x, y = dataset.tensors
    return torch.cat([x.flatten(1), y.unsqueeze(1).float()], dim=1)


def _sorted_rows(rows: torch.Tensor) -> torch.Tensor:
    for col in reversed(range(rows.shape[1])):
        rows = rows[torch.argsort(rows[:, col], stable=True)]
    return rows


def test_properties_before_setup():
    dm = DigitsDataModule()
    assert (dm.num_classes, dm.in_channels, dm.image_size) == (10, 1, (8, 8))
    assert dm.class_names == [str(i) for i in range(10)]
    assert dm.hparams.val_fraction == 0.15 and dm.hparams.batch_size == 64
    with pytest.raises(RuntimeError, match="call setup"):
        dm.train_dataloader()


def test_splits_partition_the_scikit_learn_digits():
    dm = DigitsDataModule()
    dm.setup()
    digits = load_digits()
    reference = torch.cat(
        [
            torch.tensor(digits.images, dtype=torch.float32).flatten(1) / 16.0,
            torch.tensor(digits.target, dtype=torch.float32).unsqueeze(1),
        ],
        dim=1,
    )
    ours = torch.cat([_rows(dm.train_set), _rows(dm.val_set), _rows(dm.test_set)])
    assert torch.equal(_sorted_rows(ours), _sorted_rows(reference))
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (1167, 270, 360)
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (64, 1, 8, 8) and x.dtype == torch.float32 and y.dtype == torch.long
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0


def test_split_is_stratified_and_seeded():
    dm = DigitsDataModule()
    dm.setup()
    total = torch.bincount(torch.tensor(load_digits().target), minlength=10).float()
    test_counts = torch.bincount(dm.test_set.tensors[1], minlength=10).float()
    assert torch.all((test_counts - 0.2 * total).abs() <= 1.0)
    again = DigitsDataModule()
    again.setup()
    assert torch.equal(again.test_set.tensors[0], dm.test_set.tensors[0])
    other = DigitsDataModule(seed=1)
    other.setup()
    assert not torch.equal(other.test_set.tensors[0], dm.test_set.tensors[0])


@pytest.mark.parametrize("size", [28, (16, 12)])
def test_resize_matches_torchvision_bilinear(size):
    dm = DigitsDataModule(resize=size)
    plain = DigitsDataModule()
    dm.setup()
    plain.setup()
    expected = resize(
        plain.test_set.tensors[0], list(dm.image_size), InterpolationMode.BILINEAR, antialias=True
    )
    torch.testing.assert_close(dm.test_set.tensors[0], expected.clamp(0, 1))
    assert dm.image_size == ((28, 28) if size == 28 else (16, 12))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"val_fraction": 0.0}, "val_fraction"),
        ({"test_fraction": 1.2}, "test_fraction"),
        ({"val_fraction": 0.5, "test_fraction": 0.5}, "< 1"),
        ({"batch_size": 0}, "batch_size"),
        ({"resize": (8, 8, 8)}, "resize"),
        ({"seed": -1}, "seed"),
    ],
)
def test_invalid_arguments(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        DigitsDataModule(**kwargs)
