"""Held-out subsets (`--n-samples`, certify's images) are a seeded, class-stratified subset of the
split for every data module, not its first N items: an image folder's test split is sorted by
class, so its first 30 of 20/20/20 images would be 20 of one class, 10 of the next and none of the
third."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image
from torch.utils.data import Subset, TensorDataset

from robust_train.app.checkpoint_io import heldout_tensors
from robust_train.data import DigitsDataModule, ImageFolderDataModule


def _folder(root: Path, counts: dict[str, int]) -> Path:
    for split in ("train", "test"):
        for i, (name, n) in enumerate(counts.items()):
            (root / split / name).mkdir(parents=True)
            for j in range(n):
                Image.new("L", (8, 8), 40 * i + j).save(root / split / name / f"{j}.png")
    return root


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_every_prefix_of_the_order_is_stratified(seed: int):
    from robust_train.data.base import stratified_order

    targets = torch.tensor([0] * 50 + [1] * 30 + [2] * 15 + [3] * 5)
    order = stratified_order(targets, seed)
    assert sorted(order.tolist()) == list(range(100))
    share = torch.bincount(targets, minlength=4).double() / len(targets)
    for n in range(1, 101):
        counts = torch.bincount(targets[order[:n]], minlength=4).double()
        assert torch.all((counts - n * share).abs() <= 1.0), (n, counts.tolist())


def test_the_order_is_seeded():
    from robust_train.data.base import stratified_order

    targets = torch.arange(40) % 4
    assert torch.equal(stratified_order(targets, 3), stratified_order(targets, 3))
    assert not torch.equal(stratified_order(targets, 3), stratified_order(targets, 4))


def test_labels_are_read_without_decoding_through_subsets(tmp_path: Path):
    from robust_train.data.base import dataset_targets

    data = TensorDataset(torch.zeros(5, 1, 2, 2), torch.tensor([4, 3, 2, 1, 0]))
    assert dataset_targets(Subset(Subset(data, [4, 2, 0]), [2, 0])).tolist() == [4, 0]
    root = _folder(tmp_path, {"a": 2, "b": 3})
    dm = ImageFolderDataModule(root, image_size=8, grayscale=True, val_fraction=0.4)
    dm.setup("test")
    assert dataset_targets(dm.test_set).tolist() == [0, 0, 1, 1, 1]
    assert dataset_targets([(torch.zeros(1), 0)]) is None  # labels only by reading the items


def test_an_image_folder_sorted_by_class_gives_every_class_its_share(tmp_path: Path):
    root = _folder(tmp_path, {"a": 20, "b": 20, "c": 20})
    config = {
        "class_path": "robust_train.data.ImageFolderDataModule",
        "init_args": {"root": str(root), "image_size": 8, "grayscale": True, "batch_size": 7},
    }
    x, y, _ = heldout_tensors(config, 30)
    assert x.shape == (30, 1, 8, 8) and torch.bincount(y).tolist() == [10, 10, 10]
    from robust_train.app.checkpoint_io import heldout_subset

    held = heldout_subset(config, 30, seed=5)
    assert held.describe() == {
        "n_images": 30, "split_size": 60, "selection": "seeded class-stratified subset",
        "seed": 5, "per_class": {"0": 10, "1": 10, "2": 10},
    }  # fmt: skip
    assert "seeded class-stratified subset (seed 5)" in held.sentence("test")
    # the images are those of the indices it names (the label of an image is its folder)
    dm = ImageFolderDataModule(root, image_size=8, grayscale=True)
    dm.setup("test")
    assert torch.equal(held.images, torch.stack([dm.test_set[i][0] for i in held.indices]))


def test_digits_subsets_are_stratified_and_accuracy_covers_the_whole_split():
    from robust_train.app.checkpoint_io import heldout_subset

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    config = {"class_path": "robust_train.data.DigitsDataModule", "init_args": {}}
    held = heldout_subset(config, 50, model=model)
    dm = DigitsDataModule()
    dm.setup("test")
    everything = torch.stack([dm.test_set[i][0] for i in range(len(dm.test_set))])
    labels = torch.stack([dm.test_set[i][1] for i in range(len(dm.test_set))])
    with torch.no_grad():
        expected = float((model(everything).argmax(1) == labels).float().mean())
    assert held.accuracy == pytest.approx(expected)
    share = torch.bincount(labels, minlength=10).double() / len(labels)
    counts = torch.bincount(held.labels, minlength=10).double()
    assert torch.all((counts - 50 * share).abs() <= 1.0)
    assert held.split_size == len(labels) == 360
