"""ClutteredMNIST5kDataModule: deterministic rendering over scikit-learn's photographs, masks
that are the digits, MNIST-5k's stratified split, the registry and clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robust_train.data import (
    ClutteredMNIST5kDataModule,
    MNIST5kDataModule,
    cluttered,
    get_datamodule,
    load_mnist5k_tensors,
    render_cluttered,
)

SIZE = 32  # the smallest size: the rendering of all 5,000 images is cached per process


@pytest.mark.slow  # a second rendering of the 5,000 images
def test_rendering_is_deterministic_and_the_seed_changes_it():
    images, labels, masks = render_cluttered(SIZE, 0)
    render_cluttered.cache_clear()
    again = render_cluttered(SIZE, 0)
    assert torch.equal(images, again[0]) and torch.equal(masks, again[2])
    assert torch.equal(labels, load_mnist5k_tensors()[1])
    draws, other = cluttered._draws(20, SIZE, 2, 0), cluttered._draws(20, SIZE, 2, 1)
    assert all(np.array_equal(draws[k], cluttered._draws(20, SIZE, 2, 0)[k]) for k in draws)
    assert not any(np.array_equal(draws[k], other[k]) for k in ("crop", "digit", "colour"))
    assert images.shape == (5000, 3, SIZE, SIZE) and images.dtype == torch.uint8
    assert masks.shape == (5000, SIZE, SIZE) and masks.dtype == torch.bool


def test_masks_are_the_digits_and_the_backgrounds_are_photographs():
    images, _, masks = render_cluttered(SIZE, 0)
    area = masks.flatten(1).float().mean(1)
    assert bool((area > 0).all()) and 0.03 < float(area.mean()) < 0.2
    colours = torch.from_numpy(cluttered._draws(5000, SIZE, 2, 0)["colour"]).float()
    x = images[:500].float() / 255.0
    distance = (x - colours[:500, :, None, None]).abs().amax(1)  # (500, H, W)
    inside = torch.stack([distance[i][masks[i]].mean() for i in range(500)])
    outside = torch.stack([distance[i][~masks[i]].mean() for i in range(500)])
    # mask pixels are at least half the digit's colour; the photograph is not that colour
    assert float(inside.max()) < 0.5 and float((inside < outside).float().mean()) > 0.95
    # backgrounds differ between images (crops, flips, jitter)
    assert not torch.equal(x[0, :, :4, :4], x[1, :, :4, :4])


def test_the_input_is_not_an_explanation_of_the_digit():
    images, _, masks = render_cluttered(SIZE, 0)
    brightness = images.float().sum(1)
    mass = (brightness * masks).flatten(1).sum(1) / brightness.flatten(1).sum(1)
    area = masks.flatten(1).float().mean(1)
    # "map = input" puts on the digit about the digit's share of the pixels, not most of its mass
    assert float(mass.mean()) < 2 * float(area.mean()) and float(mass.mean()) < 0.25


def test_split_is_mnist5k_split_with_masks_aligned():
    dm = ClutteredMNIST5kDataModule(image_size=SIZE, batch_size=16, seed=2)
    dm.setup()
    images, labels, masks = render_cluttered(SIZE, 0)
    indices = MNIST5kDataModule(seed=2).split_indices()
    for split, per_class in (("train", 350), ("val", 50), ("test", 100)):
        dataset = getattr(dm, f"{split}_set")
        assert torch.bincount(dataset.targets, minlength=10).tolist() == [per_class] * 10
        assert torch.equal(dm.masks(split), masks[indices[split]])
        x, y = dataset[3]
        assert torch.equal(x, images[indices[split][3]].float() / 255.0)
        assert int(y) == int(labels[indices[split][3]])
    x, y = next(iter(dm.test_dataloader()))
    assert x.shape == (16, 3, SIZE, SIZE) and x.dtype == torch.float32 and y.dtype == torch.long
    assert (dm.num_classes, dm.in_channels, dm.image_size) == (10, 3, (SIZE, SIZE))


def test_box_masks_are_the_tight_boxes_of_the_digits():
    dm = ClutteredMNIST5kDataModule(image_size=SIZE, mask="box")
    dm.setup()
    objects = ClutteredMNIST5kDataModule(image_size=SIZE)
    objects.setup()
    box, obj = dm.masks("val"), objects.masks("val")
    assert bool((box | obj).eq(box).all())  # every digit pixel is inside its box
    for i in range(0, 500, 50):
        rows, cols = obj[i].any(1).nonzero().flatten(), obj[i].any(0).nonzero().flatten()
        expected = torch.zeros_like(obj[i])
        expected[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1] = True
        assert torch.equal(box[i], expected)


def test_registered_and_clear_errors():
    assert isinstance(get_datamodule("cluttered_mnist5k"), ClutteredMNIST5kDataModule)
    for kwargs, name in (
        ({"image_size": 16}, "image_size"),
        ({"seed": -1}, "seed"),
        ({"render_seed": -1}, "render_seed"),
        ({"mask": "outline"}, "mask"),
    ):
        with pytest.raises(ValueError, match=f"`?{name}`?"):
            ClutteredMNIST5kDataModule(**kwargs)
    dm = ClutteredMNIST5kDataModule(image_size=SIZE)
    with pytest.raises(RuntimeError, match="setup"):
        dm.masks("test")
    dm.setup()
    with pytest.raises(ValueError, match="`split`.*'tst'"):
        dm.masks("tst")


def test_rerendered_training_set_changes_every_epoch_and_keeps_the_digits():
    torch.manual_seed(0)
    dm = ClutteredMNIST5kDataModule(image_size=SIZE, rerender=True, batch_size=500)
    dm.setup()
    fixed = ClutteredMNIST5kDataModule(image_size=SIZE)
    fixed.setup()
    assert type(dm.train_set).__name__ == "RerenderedDigits"  # doctests import a second copy
    assert torch.equal(dm.train_set.targets, fixed.train_set.targets)
    assert torch.equal(dm.test_set.images, fixed.test_set.images)  # val and test stay fixed
    small = cluttered.RerenderedDigits(torch.arange(3), SIZE)
    epochs = [torch.stack([small[i][0] for i in range(3)]) for _ in range(2)]
    assert not torch.equal(epochs[0], epochs[1])
    torch.manual_seed(5)
    again = cluttered.RerenderedDigits(torch.arange(3), SIZE)
    first = torch.stack([again[i][0] for i in range(3)])
    torch.manual_seed(5)
    repeat = cluttered.RerenderedDigits(torch.arange(3), SIZE)
    assert torch.equal(first, torch.stack([repeat[i][0] for i in range(3)]))
