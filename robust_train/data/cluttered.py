"""Cluttered MNIST-5k: coloured digits of any size, anywhere, over real photographs, with the
ground-truth mask of every digit. Rendered deterministically at first use; nothing is downloaded.

Each of the 5,000 MNIST-5k digits (`robust_train.data.mnist5k`) becomes one RGB image:

- the background is a random square crop of one of the two photographs shipped inside
  scikit-learn (`china.jpg`, `flower.jpg`, read by `sklearn.datasets.load_sample_images`), of
  side 1 to 4 times the image size, resized to the image size (2 x 2 samples a pixel),
  flipped left-right at random, then jittered: a brightness factor in [0.7, 1.3], a contrast
  factor in [0.6, 1], a saturation factor in [0.5, 1.5], and a random permutation of the colour
  channels;
- the digit (its 28 x 28 MNIST box) is scaled to a side of 50-70 % of the image, placed at a
  random position fully inside the image, and alpha-blended in a random saturated colour
  (hue uniform, saturation in [0.8, 1], value in [0.9, 1]) with its grey level as the alpha;
- the mask is where that alpha exceeds 1/2 (the digit's strokes); `mask="box"` gives their
  tight bounding box instead.

The brightest pixels of an image are mostly background, so an importance map that copies the
input does not find the digit, while every label is carried by the digit alone.
"""

from __future__ import annotations

import colorsys
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor
from torch.nn import functional as F
from torch.utils.data import Dataset

from robust_train.core.validation import check_non_negative, check_positive
from robust_train.data.base import DigitImagesDataModule, ImageTensorDataset
from robust_train.data.mnist5k import MNIST5kDataModule, load_mnist5k_tensors

__all__ = ["ClutteredMNIST5kDataModule", "MASK_KINDS", "RerenderedDigits", "render_cluttered"]

MASK_KINDS = ("object", "box")
_CHUNK = 500  # images rendered at once (bounds the float32 working memory)
DIGIT_SIDE = (0.5, 0.7)  # the digit's box, as a share of the image side
JITTER = ((0.7, 0.6, 0.5), (1.3, 1.0, 1.5))  # brightness, contrast, saturation ranges
COLOUR = ((0.8, 1.0), (0.9, 1.0))  # saturation and value ranges of the digit's colour


@lru_cache(maxsize=1)
def _photographs() -> Tensor:
    """scikit-learn's two sample photographs, float (2, 3, 427, 640) in [0, 1]."""
    from sklearn.datasets import load_sample_images

    images = load_sample_images().images
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float().div_(255.0)


def _draws(n: int, size: int, n_photos: int, seed: int) -> dict[str, np.ndarray]:
    """Every random choice of the rendering, drawn at once in a fixed order."""
    rng = np.random.default_rng(seed)
    height, width = _photographs().shape[-2:]
    crop = rng.uniform(size, min(4 * size, height, width), n)
    digit = rng.uniform(*DIGIT_SIDE, n) * size
    hues, sats, vals = rng.uniform(0, 1, n), rng.uniform(*COLOUR[0], n), rng.uniform(*COLOUR[1], n)
    colours = np.array(
        [colorsys.hsv_to_rgb(*c) for c in zip(hues, sats, vals, strict=True)]
    ).reshape(n, 3)
    return {
        "photo": rng.integers(0, n_photos, n),
        "crop": crop,
        "crop_y": rng.uniform(0, 1, n) * (height - crop),
        "crop_x": rng.uniform(0, 1, n) * (width - crop),
        "flip": rng.random(n) < 0.5,
        "jitter": rng.uniform(JITTER[0], JITTER[1], (n, 3)),
        "channels": np.array([rng.permutation(3) for _ in range(n)]).reshape(n, 3),
        "digit": digit,
        "digit_y": rng.uniform(0, 1, n) * (size - digit),
        "digit_x": rng.uniform(0, 1, n) * (size - digit),
        "colour": colours,
    }


def _backgrounds(draws: dict[str, np.ndarray], size: int) -> Tensor:
    """Crop, resize (each pixel the mean of 2 x 2 bilinear samples of its area), flip, jitter:
    (n, 3, size, size)."""
    from torchvision.ops import roi_align

    photos = _photographs()
    y0, x0, side = (torch.from_numpy(draws[k]).float() for k in ("crop_y", "crop_x", "crop"))
    boxes = torch.stack([torch.from_numpy(draws["photo"]).float(), x0, y0, x0 + side, y0 + side], 1)
    out = roi_align(photos, boxes, output_size=size, sampling_ratio=2, aligned=True)
    flip = torch.from_numpy(draws["flip"])
    out[flip] = out[flip].flip(-1)
    jitter = torch.from_numpy(draws["jitter"]).float()
    brightness, contrast, saturation = (jitter[:, i, None, None, None] for i in range(3))
    out = out * brightness
    grey = out.mean(1, keepdim=True)
    out = (out - grey.mean((2, 3), keepdim=True)) * contrast + grey.mean((2, 3), keepdim=True)
    grey = out.mean(1, keepdim=True)
    out = ((out - grey) * saturation + grey).clamp_(0.0, 1.0)
    channels = torch.from_numpy(draws["channels"])
    return torch.gather(out, 1, channels[:, :, None, None].expand_as(out))


def _alphas(digits: Tensor, draws: dict[str, np.ndarray], size: int) -> Tensor:
    """The digits (n, 1, 28, 28) scaled and moved into (n, 1, size, size) frames (bilinear)."""
    side = torch.from_numpy(draws["digit"]).float()
    top, left = (torch.from_numpy(draws[k]).float() for k in ("digit_y", "digit_x"))
    scale = size / side  # output [-1, 1] coordinates -> digit [-1, 1] coordinates
    centre_y = (top + side / 2) / size * 2 - 1
    centre_x = (left + side / 2) / size * 2 - 1
    theta = torch.zeros(len(side), 2, 3)
    theta[:, 0, 0], theta[:, 1, 1] = scale, scale
    theta[:, 0, 2], theta[:, 1, 2] = -centre_x * scale, -centre_y * scale
    grid = F.affine_grid(theta, [len(side), 1, size, size], align_corners=False)
    alpha = F.grid_sample(digits, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return alpha.clamp_(0.0, 1.0)


def _box_masks(masks: Tensor) -> Tensor:
    """The tight bounding box of each mask (n, H, W), as a mask (empty where the mask is)."""
    rows, cols = masks.any(2), masks.any(1)
    span_rows = rows.cumsum(1).bool() & rows.flip(1).cumsum(1).flip(1).bool()
    span_cols = cols.cumsum(1).bool() & cols.flip(1).cumsum(1).flip(1).bool()
    return span_rows[:, :, None] & span_cols[:, None, :]


def _compose(digits: Tensor, draws: dict[str, np.ndarray], size: int) -> tuple[Tensor, Tensor]:
    """The digits (n, 1, 28, 28) over their backgrounds: uint8 images and bool masks."""
    alpha = _alphas(digits, draws, size)
    colour = torch.from_numpy(draws["colour"]).float()[:, :, None, None]
    mixed = (1.0 - alpha) * _backgrounds(draws, size) + alpha * colour
    return mixed.mul_(255.0).round_().to(torch.uint8), alpha[:, 0] > 0.5


def _render(digits: Tensor, size: int, seed: int) -> tuple[Tensor, Tensor]:
    """The digits (n, 1, 28, 28) rendered with the draws of `seed`: uint8 images, bool masks."""
    draws = _draws(len(digits), size, len(_photographs()), seed)
    images = torch.empty(len(digits), 3, size, size, dtype=torch.uint8)
    masks = torch.empty(len(digits), size, size, dtype=torch.bool)
    for start in range(0, len(digits), _CHUNK):
        part = {k: v[start : start + _CHUNK] for k, v in draws.items()}
        chunk = slice(start, start + _CHUNK)
        images[chunk], masks[chunk] = _compose(digits[chunk], part, size)
    return images, masks


class RerenderedDigits(Dataset):
    """(image, label) of MNIST-5k digits rendered afresh once per pass: after every `len(self)`
    accesses (an epoch of a dataloader), all its digits get a new background, colour, size and
    position (training-time augmentation). Each rendering's seed comes from torch's global
    generator, so `seed_everything` makes a run repeatable; with dataloader workers each worker
    renders its own copy.

    Args:
        indices: MNIST-5k indices of the digits.
        size: side of the square images.

    Examples:
        >>> data = RerenderedDigits(torch.arange(4), 32)
        >>> first = torch.stack([data[i][0] for i in range(4)])
        >>> second = torch.stack([data[i][0] for i in range(4)])
        >>> tuple(first.shape), bool(torch.equal(first, second)), data[0][1].item()
        ((4, 3, 32, 32), False, 0)
    """

    def __init__(self, indices: Tensor, size: int) -> None:
        digits, labels = load_mnist5k_tensors()
        self.digits, self.targets, self.size = digits[indices], labels[indices], size
        self.images: Tensor | None = None
        self.served = 0

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        if self.images is None or self.served >= len(self):
            seed = int(torch.randint(0, 2**62, ()).item())
            self.images, self.served = _render(self.digits, self.size, seed)[0], 0
        self.served += 1
        return self.images[index].float() / 255.0, self.targets[index]


@lru_cache(maxsize=2)
def render_cluttered(size: int = 64, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """All 5,000 cluttered images, uint8 (5000, 3, size, size), their labels (5000,) and the
    digits' masks, bool (5000, size, size); image i shows MNIST-5k digit i.

    The result depends on `size` and `seed` only (and is cached for the process).

    Args:
        size: side of the square images, at least 32.
        seed: seed of every random choice of the rendering.

    Returns:
        (images, labels, masks).

    Raises:
        ValueError: `size` below 32 or `seed` negative.

    Examples:
        >>> images, labels, masks = render_cluttered(32)
        >>> tuple(images.shape), images.dtype, tuple(masks.shape), bool(masks.any((1, 2)).all())
        ((5000, 3, 32, 32), torch.uint8, (5000, 32, 32), True)
    """
    check_positive(size, "size", integer=True)
    if size < 32:
        raise ValueError(f"`size` must be at least 32, got {size!r}")
    check_non_negative(seed, "seed", integer=True)
    digits, labels = load_mnist5k_tensors()
    images, masks = _render(digits, size, seed)
    return images, labels, masks


class ClutteredMNIST5kDataModule(DigitImagesDataModule):
    """Cluttered MNIST-5k (see the module docstring): RGB digits over photographs, with masks.

    The split is MNIST-5k's (`MNIST5kDataModule`: 3,500 / 500 / 1,000, seeded and stratified by
    class), so a digit is in the same split in both data sets. Items are (image, label) with images
    float in [0, 1], shape (3, size, size); `masks(split)` gives the ground-truth masks of a
    split, bool (N, size, size), in the order of its items.

    Args:
        image_size: side of the square images (at least 32).
        batch_size: batch size of every dataloader.
        seed: seed of the split.
        render_seed: seed of the rendering (backgrounds, colours, sizes, positions).
        mask: "object" (the digit's pixels) or "box" (their tight bounding box).
        rerender: render the training images afresh at every epoch (`RerenderedDigits`: a new
            background, colour, size and position for the same digits; an augmentation against
            over-fitting the 3,500 training images); val and test stay fixed.
        num_workers: dataloader workers.

    Raises:
        ValueError: an argument out of range (named in the message).

    Examples:
        >>> dm = ClutteredMNIST5kDataModule(image_size=32)
        >>> dm.setup()
        >>> x, y = dm.test_set[0]
        >>> tuple(x.shape), dm.num_classes, tuple(dm.masks("test").shape)
        ((3, 32, 32), 10, (1000, 32, 32))
    """

    channels = 3  # RGB

    def __init__(
        self,
        image_size: int = 64,
        batch_size: int = 64,
        seed: int = 0,
        render_seed: int = 0,
        mask: str = "object",
        rerender: bool = False,
        num_workers: int = 0,
    ) -> None:
        super().__init__(batch_size, num_workers)
        self.save_hyperparameters()
        check_positive(image_size, "image_size", integer=True)
        if image_size < 32:
            raise ValueError(f"`image_size` must be at least 32, got {image_size!r}")
        check_non_negative(seed, "seed", integer=True)
        check_non_negative(render_seed, "render_seed", integer=True)
        if mask not in MASK_KINDS:
            raise ValueError(f"`mask` must be one of {MASK_KINDS}, got {mask!r}")
        self._masks: dict[str, Tensor] = {}

    @property
    def image_size(self) -> tuple[int, int]:
        side = int(self.hparams["image_size"])
        return (side, side)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        hp = self.hparams
        images, labels, masks = render_cluttered(hp["image_size"], hp["render_seed"])
        if hp["mask"] == "box":
            masks = _box_masks(masks)
        indices = MNIST5kDataModule(seed=hp["seed"]).split_indices()
        sets = {k: ImageTensorDataset(images[i], labels[i]) for k, i in indices.items()}
        self._masks = {k: masks[i] for k, i in indices.items()}
        self.train_set, self.val_set, self.test_set = sets["train"], sets["val"], sets["test"]
        if hp["rerender"]:
            self.train_set = RerenderedDigits(indices["train"], hp["image_size"])

    def masks(self, split: str) -> Tensor:
        """The ground-truth masks of `split` ("train", "val" or "test"), bool (N, H, W), row i
        the mask of item i of that split.

        Raises:
            ValueError: an unknown `split`.
            RuntimeError: before `setup()`.
        """
        if split not in ("train", "val", "test"):
            raise ValueError(f"`split` must be 'train', 'val' or 'test', got {split!r}")
        if not self._masks:
            raise RuntimeError(f"{type(self).__name__} has no masks yet: call setup() first")
        return self._masks[split]
