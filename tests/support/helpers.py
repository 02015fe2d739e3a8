"""Tiny deterministic models and data for tests (Captum's basic_models idea, written here)."""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import Tensor, nn


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class LinearModel(nn.Module):
    """logits = W vec(x) + b: saliency is constant, input x gradient is x * W[target]."""

    def __init__(
        self, in_shape: tuple[int, int, int] = (1, 8, 8), num_classes: int = 10, seed: int = 0
    ):
        super().__init__()
        torch.manual_seed(seed)
        self.flatten = nn.Flatten()
        self.linear = nn.Linear(int(np.prod(in_shape)), num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(self.flatten(x))


class TinyCNN(nn.Module):
    """Conv-ReLU-pool-linear, with optional BatchNorm and Dropout (train/eval behaviour differs)."""

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        size: int = 8,
        *,
        batchnorm: bool = False,
        dropout: float = 0.0,
        seed: int = 0,
    ):
        super().__init__()
        torch.manual_seed(seed)
        layers: list[nn.Module] = [nn.Conv2d(in_channels, 8, 3, padding=1)]
        if batchnorm:
            layers.append(nn.BatchNorm2d(8))
        layers += [
            nn.ReLU(inplace=True),
            nn.Conv2d(8, 8, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
        ]
        if dropout:
            layers.append(nn.Dropout(dropout))
        layers.append(nn.Linear(8 * 16, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class SmoothMLP(nn.Module):
    """Two-layer softplus MLP: non-zero second derivatives everywhere."""

    def __init__(
        self, in_shape: tuple[int, int, int] = (1, 8, 8), num_classes: int = 10, seed: int = 0
    ):
        super().__init__()
        torch.manual_seed(seed)
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(int(np.prod(in_shape)), 32),
            nn.Softplus(beta=5.0),
            nn.Linear(32, num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


def relu_conv_net(
    hidden: int | None = 8, classes: int = 3, seed: int = 0, channels: int = 4, size: int = 8
) -> nn.Module:
    """A seeded ReLU network on 1 x `size` x `size` images in eval mode: one convolution to
    `channels` channels, then a hidden layer of `hidden` units (None: none) and `classes`
    logits."""
    torch.manual_seed(seed)
    width = channels * size * size
    conv = nn.Conv2d(1, channels, 3, padding=1)  # built first: the seeded draws as written inline
    head: list[nn.Module] = (
        [nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, classes)]
        if hidden is not None
        else [nn.Linear(width, classes)]
    )
    return nn.Sequential(conv, nn.ReLU(), nn.Flatten(), *head).eval()


def digits_tensors() -> tuple[Tensor, Tensor]:
    """scikit-learn's bundled 8x8 digits as images in [0, 1], shape (1797, 1, 8, 8), and labels."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(d.target, dtype=torch.long)
    return x, y


def train_digits_cnn(epochs: int = 8, seed: int = 0) -> tuple[nn.Module, Tensor, Tensor]:
    """Train a TinyCNN on the first 1400 digits; return (eval model, held-out x, held-out y)."""
    x, y = digits_tensors()
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(x), generator=g)
    x, y = x[perm], y[perm]
    model = TinyCNN(seed=seed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(epochs):
        for i in range(0, 1400, 64):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x[i : i + 64]), y[i : i + 64])
            loss.backward()
            opt.step()
    return model.eval(), x[1400:], y[1400:]


@functools.cache
def random_torchvision(name: str, num_classes: int = 10) -> nn.Module:
    """A torchvision classifier with random weights, in eval mode, built once per test session
    (callers must not change it). VGG's 100M-parameter classifier is replaced by one Linear
    layer (its features, with their in-place ReLUs, are what the explainer tests need)."""
    import torchvision

    torch.manual_seed(0)
    if name.startswith("vgg"):
        model = getattr(torchvision.models, name)(num_classes=num_classes, init_weights=False)
        model.classifier = nn.Linear(512 * 7 * 7, num_classes)
    else:
        model = getattr(torchvision.models, name)(num_classes=num_classes)
    return model.eval()


def write_image_folder(root, per_class: int = 6, truncate: tuple[str, ...] = ()) -> list:
    """root/train/{cat,dog}/<i>.png and one <cat|dog>/j.jpg each, 20x20 random RGB; the files named
    in `truncate` (relative to root/train, e.g. "cat/3.png", "dog/j.jpg") are cut to half their
    bytes, as an interrupted copy leaves them. Returns the truncated paths."""
    from pathlib import Path

    from PIL import Image

    rng = np.random.default_rng(0)
    train = Path(root) / "train"
    for cls in ("cat", "dog"):
        (train / cls).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(0, 255, (20, 20, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(train / cls / f"{i}.png")
        pixels = rng.integers(0, 255, (20, 20, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(train / cls / "j.jpg", quality=95)
    cut = [train / name for name in truncate]
    for path in cut:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    return cut
