"""The figure of cluttered MNIST-5k examples in the documentation.

    python -m robust_train.data.cluttered_examples docs/images/cluttered_mnist5k_examples.png

Two rows per set of test images: the images as a model sees them, then the same images with the
outline of their ground-truth mask.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from robust_train.data.cluttered import ClutteredMNIST5kDataModule

__all__ = ["plot_cluttered_examples"]


def plot_cluttered_examples(path: str | Path, n_columns: int = 8, image_size: int = 64) -> Path:
    """Write a PNG of the first `n_columns` test images, with and without their masks' outline.

    Args:
        path: the PNG to write (its folder is created).
        n_columns: images shown.
        image_size: side of the images.

    Returns:
        The path written.

    Examples:
        >>> import tempfile, os
        >>> out = plot_cluttered_examples(os.path.join(tempfile.mkdtemp(), "x.png"), 2, 32)
        >>> out.stat().st_size > 0
        True
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dm = ClutteredMNIST5kDataModule(image_size=image_size)
    dm.setup()
    assert dm.test_set is not None
    masks = dm.masks("test")
    fig, axes = plt.subplots(2, n_columns, figsize=(1.6 * n_columns, 3.5), squeeze=False)
    for i in range(n_columns):
        image, label = dm.test_set[i]
        for row in (0, 1):
            ax = axes[row, i]
            ax.imshow(image.permute(1, 2, 0).numpy(), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
        axes[0, i].set_title(f"label {int(label)}", fontsize=9)
        axes[1, i].contour(masks[i].float().numpy(), levels=[0.5], colors="white", linewidths=1)
    axes[0, 0].set_ylabel("input", fontsize=9)
    axes[1, 0].set_ylabel("mask outline", fontsize=9)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


if __name__ == "__main__":  # pragma: no cover
    target = sys.argv[1] if len(sys.argv) > 1 else "cluttered_mnist5k_examples.png"
    torch.set_num_threads(1)
    print(plot_cluttered_examples(target))
