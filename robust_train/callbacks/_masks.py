"""Ground-truth masks of a monitor's held-out images, where the datamodule has them.

A datamodule with a `masks(split)` method (`robust_train.data.ClutteredMNIST5kDataModule`) gives
one (H, W) mask of the evidence per item of the split; the monitor's subset takes the rows
`heldout_rows(n_samples, seed, mode="random")` of that split (`_subset.from_dataloader`), so the
same rows of the masks belong to it. An evaluation sees a prefix or a shard of the subset (the
time budget, DDP, the one-image probe): `masks_of` finds each evaluated image's row in the subset
by its pixels.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from robust_train.data.base import heldout_rows

__all__ = ["masks_from_trainer", "masks_of"]


def masks_from_trainer(trainer: Any, split: str, n_samples: int, seed: int) -> Tensor | None:
    """The masks (N, H, W) of the held-out rows of `trainer.datamodule`'s `split`, bool, on the
    CPU; None when the datamodule has no `masks` method."""
    get = getattr(getattr(trainer, "datamodule", None), "masks", None)
    if not callable(get):
        return None
    masks = torch.as_tensor(get(split))
    rows = heldout_rows(n_samples, seed, mode="random", size=masks.shape[0])
    return masks[rows].bool().cpu()


def masks_of(inputs: Tensor, subset: Tensor, masks: Tensor) -> Tensor:
    """The masks of `inputs` (B, C, H, W), each of them a row of `subset` (N, C, H, W) whose mask
    is the same row of `masks` (N, H, W); on `inputs`' device.

    Raises:
        ValueError: an input that is no row of `subset`.

    Examples:
        >>> subset = torch.rand(4, 1, 2, 2)
        >>> masks = torch.arange(4).view(4, 1, 1).expand(4, 2, 2) > 1
        >>> masks_of(subset[[3, 0]], subset, masks)[:, 0, 0].tolist()
        [True, False]
    """
    flat_in, flat_sub = inputs.detach().flatten(1).cpu().double(), subset.flatten(1).double()
    weights = torch.linspace(1.0, 2.0, flat_sub.shape[1], dtype=torch.float64)
    rows = ((flat_in @ weights)[:, None] - (flat_sub @ weights)[None]).abs().argmin(1)
    if not torch.equal(flat_sub[rows], flat_in):
        raise ValueError("the evaluated images are not all rows of the monitor's held-out subset")
    return masks[rows].to(inputs.device)
