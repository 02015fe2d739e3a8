"""The held-out images an evaluation runs on: a seeded, class-stratified subset of a split.

`heldout_subset(data, n, split, model)` sets up a datamodule (or one built from a user's
`{"class_path", "init_args"}` config, `instantiate`), checks with one probe forward that the model
fits its images, and takes the first n of one fixed seeded order of the split in which every
prefix holds each class in proportion (`robust_train.data.stratified_order`), with the model's
accuracy on the whole split. A datamodule with a `masks(split)` method (ground-truth masks of the
evidence) gives the masks of those images, in their order (`heldout_masks`). Data settings that
cannot be used here are a `DataSettingsError` (one line, exit code 2 from the command line).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from pytorch_lightning import LightningDataModule
from torch import Tensor, nn
from torch.utils.data import DataLoader, Subset

from robust_train.core.files import OutputError
from robust_train.core.trust import TRUST_CLASS_PATH, resolve_class
from robust_train.data.base import dataset_targets, heldout_rows
from robust_train.models.input_check import check_model_fits_data

__all__ = [
    "DataSettingsError",
    "HeldOut",
    "heldout_masks",
    "heldout_subset",
    "heldout_tensors",
    "instantiate",
]


class DataSettingsError(ValueError):
    """Recorded (or given) data settings that cannot be used here: a folder that does not exist,
    files that are missing, a datamodule that fails to set up (one line, exit code 2)."""

    user_error = True


def instantiate(
    config: dict[str, Any],
    what: str = "the data config",
    *,
    recorded: bool = False,
    opt_in: str = TRUST_CLASS_PATH,
) -> LightningDataModule:
    """Build a datamodule from {"class_path": "pkg.mod.Class", "init_args": {...}}; the class is
    checked to be a LightningDataModule before it is called (`recorded`: the config was read
    from a checkpoint, see `robust_train.core.trust.resolve_class`)."""
    if not isinstance(config, dict):
        raise ValueError(f"{what} must be a dict with 'class_path', got {config!r}")
    cls = resolve_class(
        config.get("class_path"), LightningDataModule, what, recorded=recorded, opt_in=opt_in
    )
    init_args = config.get("init_args") or {}
    if not isinstance(init_args, dict):
        raise ValueError(f"the init_args of {what} must be a dict, got {init_args!r}")
    return cls(**init_args)


@dataclass(frozen=True)
class HeldOut:
    """The held-out images a command evaluates: a seeded, class-stratified subset of a split.

    Attributes:
        images, labels: the subset (N, C, H, W) and (N,).
        indices: their positions in the split.
        split_size: the number of items in the split.
        seed: the seed of the order the subset is the first N of.
        accuracy: the model's accuracy on the whole split (None without a model).
    """

    images: Tensor
    labels: Tensor
    indices: list[int]
    split_size: int
    seed: int
    accuracy: float | None = None

    def describe(self) -> dict[str, Any]:
        """What results.json records about the subset."""
        counts = torch.bincount(self.labels).tolist() if len(self.labels) else []
        return {
            "n_images": len(self.labels),
            "split_size": self.split_size,
            "selection": "seeded class-stratified subset" if len(self.labels) < self.split_size
            else "the whole split",
            "seed": self.seed,
            "per_class": {str(c): n for c, n in enumerate(counts) if n},
        }  # fmt: skip

    def sentence(self, split: str) -> str:
        """One line for the output: how many images and how they were chosen."""
        d = self.describe()
        how = "all of them" if d["selection"] == "the whole split" else (
            f"a seeded class-stratified subset (seed {self.seed})"
        )  # fmt: skip
        return f"{d['n_images']} of the {self.split_size} {split} images: {how}"


def _setup(dm: Any, split: str, where: str) -> DataLoader:
    """The split's dataloader; a datamodule that fails to set up is a DataSettingsError naming
    where its settings came from."""
    try:
        dm.prepare_data()
        dm.setup("test" if split == "test" else "validate")
        return dm.test_dataloader() if split == "test" else dm.val_dataloader()
    except (DataSettingsError, OutputError):
        raise
    except Exception as err:  # noqa: BLE001 - any failure of the data is reported as one line
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise DataSettingsError(
            f"{where} ({type(dm).__name__}) cannot give its {split} split here: {first}"
            + ("; pass --data-config CONFIG.yaml" if "recorded" in where else "")
        ) from err


def _labels_and_accuracy(
    loader: DataLoader, model: nn.Module | None
) -> tuple[Tensor, float | None]:
    """Every label of the split, and the model's accuracy on it, in one pass."""
    labels, correct = [], 0
    device = _device_of(model)
    for x, y in loader:
        labels.append(y)
        if model is not None:
            with torch.no_grad():
                correct += int((model(x.to(device)).argmax(1).cpu() == y).sum())
    all_labels = torch.cat(labels) if labels else torch.zeros(0, dtype=torch.long)
    total = len(all_labels)
    return all_labels, (correct / total if model is not None and total else None)


def _device_of(model: nn.Module | None) -> torch.device:
    param = None if model is None else next(model.parameters(), None)
    return torch.device("cpu") if param is None else param.device


def heldout_subset(
    data: dict[str, Any] | LightningDataModule,
    n_samples: int,
    split: str = "test",
    model: nn.Module | None = None,
    *,
    seed: int = 0,
    where: str = "the data config",
) -> HeldOut:
    """A seeded, class-stratified subset of `n_samples` images of a split, and, when a model is
    given, its accuracy on the whole split (after one probe forward that checks the model fits).

    Args:
        data: a datamodule, or a `{"class_path", "init_args"}` config (the user's own).
        n_samples: images wanted (all of them when the split is smaller).
        split: "test" or "val".
        model: the classifier, for the probe and the accuracy.
        seed: seed of the order (`robust_train.data.stratified_order`); every prefix of it is
            stratified, so a larger `n_samples` extends a smaller one.
        where: where the data settings came from, for errors (e.g. "`--data-config` 'd.yaml'").
    """
    dm = instantiate(data, where) if isinstance(data, dict) else data
    loader = _setup(dm, split, where)
    if model is not None:  # one probe forward: channels, size and classes
        check_model_fits_data(model, dm, loader)
    dataset = loader.dataset
    labels, accuracy = dataset_targets(dataset), None
    if labels is None or model is not None:
        streamed, accuracy = _labels_and_accuracy(loader, model)
        labels = streamed if labels is None else labels
    if len(labels) == 0:
        raise DataSettingsError(f"the {split} split of {where} ({type(dm).__name__}) is empty")
    index = heldout_rows(n_samples, seed, mode="stratified", targets=labels).tolist()
    batches = DataLoader(
        Subset(dataset, index),
        batch_size=getattr(loader, "batch_size", None) or 64,
        shuffle=False,
        collate_fn=loader.collate_fn,
    )
    xs, ys = zip(*[(x, y) for x, y in batches], strict=True)
    return HeldOut(torch.cat(xs), torch.cat(ys), index, len(labels), seed, accuracy)


def heldout_tensors(
    data_config: dict[str, Any] | LightningDataModule,
    n_samples: int,
    split: str = "test",
    model: nn.Module | None = None,
) -> tuple[Tensor, Tensor, float | None]:
    """`n_samples` images and labels of a datamodule's held-out split (a seeded class-stratified
    subset, `heldout_subset`), and, when a model is given, its accuracy on the whole split."""
    held = heldout_subset(data_config, n_samples, split, model)
    return held.images, held.labels, held.accuracy


def heldout_masks(dm: Any, split: str, held: HeldOut) -> Tensor | None:
    """The ground-truth masks of the held-out images, in their order, when the datamodule has
    them (a `masks(split)` method giving (N, H, W), row i for item i of the split, such as
    `robust_train.data.ClutteredMNIST5kDataModule`); None otherwise.

    Raises:
        DataSettingsError: masks that do not fit the split (their number or image size).
    """
    masks_of = getattr(dm, "masks", None)
    if not callable(masks_of):
        return None
    masks = masks_of(split)
    size = tuple(held.images.shape[-2:])
    shape = tuple(masks.shape) if isinstance(masks, Tensor) else None
    if shape != (held.split_size, *size):
        got = shape or type(masks).__name__
        raise DataSettingsError(
            f"{type(dm).__name__}.masks({split!r}) must be {(held.split_size, *size)} for its "
            f"{split} split, got {got}"
        )
    return masks[torch.as_tensor(held.indices, dtype=torch.long)]
