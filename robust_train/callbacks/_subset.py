"""The fixed held-out images a monitor evaluates, taken once and sharded across ranks."""

from __future__ import annotations

from collections.abc import Iterable, Sized
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from robust_train.core.lightning_compat import lightning_classes
from robust_train.core.validation import check_images, check_target
from robust_train.data.base import heldout_rows

SPLITS = ("val", "test")


def select(inputs: Tensor, targets: Tensor, n_samples: int, seed: int) -> tuple[Tensor, Tensor]:
    """`n_samples` rows of (inputs, targets) chosen by a permutation seeded with `seed`.

    Examples:
        >>> x, y = torch.rand(10, 1, 2, 2), torch.arange(10)
        >>> a, b = select(x, y, 3, seed=0)
        >>> a.shape, bool((select(x, y, 3, seed=0)[1] == b).all())
        (torch.Size([3, 1, 2, 2]), True)
    """
    if inputs.shape[0] <= n_samples:
        return inputs, targets
    rows = heldout_rows(n_samples, seed, mode="random", size=inputs.shape[0])
    return inputs[rows], targets[rows]


def shard(inputs: Tensor, targets: Tensor, rank: int, world_size: int) -> tuple[Tensor, Tensor]:
    """The rows this process evaluates: every `world_size`-th row from `rank` (DDP).

    Examples:
        >>> shard(torch.zeros(5, 1, 1, 1), torch.arange(5), 1, 2)[1].tolist()
        [1, 3]
    """
    return inputs[rank::world_size], targets[rank::world_size]


def from_dataloader(
    loader: DataLoader, n_samples: int, seed: int, what: str
) -> tuple[Tensor, Tensor]:
    """A seeded subset of a loader's dataset (map-style: only the chosen items are loaded and
    collated with the loader's collate_fn; iterable: the first `n_samples` items)."""
    dataset = getattr(loader, "dataset", None)
    if (
        dataset is not None
        and isinstance(dataset, Sized)
        and not isinstance(dataset, IterableDataset)
    ):
        size = len(dataset)
        if size == 0:
            raise ValueError(f"the {what} is empty: no held-out images to evaluate")
        rows = heldout_rows(n_samples, seed, mode="random", size=size).tolist()
        collate = getattr(loader, "collate_fn", None) or torch.utils.data.default_collate
        batch = collate([dataset[i] for i in rows])  # type: ignore[index]  # map-style
        inputs, targets = _split_batch(batch, what)
    else:
        xs, ys, count = [], [], 0
        for batch in loader:
            x, y = _split_batch(batch, what)
            xs.append(x)
            ys.append(y)
            count += x.shape[0]
            if count >= n_samples:
                break
        if not xs:
            raise ValueError(f"the {what} is empty: no held-out images to evaluate")
        inputs, targets = torch.cat(xs)[:n_samples], torch.cat(ys)[:n_samples]
    return _checked(inputs, targets, what)


def from_trainer(
    trainer: pl.Trainer, split: str, n_samples: int, seed: int
) -> tuple[Tensor, Tensor]:
    """The subset from `trainer.datamodule`'s (else the LightningModule's, else the Trainer's)
    val/test dataloader."""
    loader = _find_loader(trainer, split)
    if isinstance(loader, Iterable) and not isinstance(loader, DataLoader):
        loaders = list(loader.values() if isinstance(loader, dict) else loader)
        loader = loaders[0] if loaders else None
    if loader is None:
        raise ValueError(
            f"no {split} dataloader to take held-out images from: fit with a datamodule that has "
            f"a {split}_dataloader(), or pass `inputs` and `targets` to the callback"
        )
    return from_dataloader(loader, n_samples, seed, f"{split} dataloader")


def from_tensors(inputs: Any, targets: Any) -> tuple[Tensor, Tensor]:
    """The tensors given to a callback's constructor, validated, detached, on the CPU."""
    return _checked(inputs, targets, None)


def _find_loader(trainer: pl.Trainer, split: str) -> Any:
    method = f"{split}_dataloader"
    datamodule = getattr(trainer, "datamodule", None)
    if datamodule is not None and _overridden(datamodule, method):
        try:
            return getattr(datamodule, method)()
        except (AttributeError, RuntimeError, TypeError):
            # Datasets that setup("fit") did not build yet (a test split, usually).
            datamodule.setup("test" if split == "test" else "validate")
            return getattr(datamodule, method)()
    module = trainer.lightning_module
    if module is not None and _overridden(module, method):
        return getattr(module, method)()
    loaders = trainer.val_dataloaders if split == "val" else trainer.test_dataloaders
    return loaders if loaders is not None else _given_loader(trainer, split)


def _given_loader(trainer: pl.Trainer, split: str) -> Any:
    """The loader passed to `trainer.fit(model, train, val)` before Lightning has loaded it
    (the monitors check their settings against the images when the fit starts); None when
    Lightning's internals differ or nothing was passed."""
    try:
        loop = trainer.fit_loop.epoch_loop.val_loop if split == "val" else trainer.test_loop
        instance = loop._data_source.instance
    except Exception:  # noqa: BLE001  (a private attribute of another version: defer the check)
        return None
    hooks = lightning_classes("LightningModule") + lightning_classes("LightningDataModule")
    if instance is None or isinstance(instance, hooks):
        return None
    return instance


def _overridden(obj: Any, method: str) -> bool:
    """`method` is defined below Lightning's base classes (of either Lightning package)."""
    bases = lightning_classes("LightningModule") + lightning_classes("LightningDataModule")
    own = getattr(type(obj), method, None)
    return all(own is not getattr(base, method, None) for base in bases)


def _split_batch(batch: Any, what: str) -> tuple[Tensor, Tensor]:
    if isinstance(batch, dict):
        batch = (batch.get("image", batch.get("inputs")), batch.get("label", batch.get("target")))
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        raise ValueError(
            f"the {what} must yield (images, labels) batches, got {type(batch).__name__}"
        )
    return batch[0], batch[1]


def _checked(inputs: Any, targets: Any, what: str | None) -> tuple[Tensor, Tensor]:
    """Validate images and labels; `what` None names the constructor arguments."""
    inputs = check_images(inputs, "inputs" if what is None else f"held-out images of the {what}")
    if what is not None and not isinstance(targets, Tensor):
        targets = torch.as_tensor(targets)
    targets = check_target(
        targets, inputs.shape[0], "targets" if what is None else f"held-out labels of the {what}"
    )
    return inputs.detach().cpu().float(), targets.detach().cpu()
