"""Evaluation on a split: the suite on the held-out images of a datamodule.

`evaluate_on_split(model, data, settings, split)` is what `robust-train evaluate` and `compare`
run for every model, however the model was given (a checkpoint, `--model`): the settings that
depend on the image size are checked on the datamodule's stated size before any data is loaded,
the held-out images are chosen (`robust_train.evaluation.heldout`), and the suite runs on them
(`robust_train.evaluation.evaluate_classifier`).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import torch
from pytorch_lightning import LightningDataModule
from torch import nn

from robust_train.core.runtime import set_threads
from robust_train.evaluation.engine import build_parts, total_work
from robust_train.evaluation.heldout import heldout_masks, heldout_subset, instantiate
from robust_train.evaluation.settings import EvaluationSettings
from robust_train.evaluation.suite import evaluate_classifier
from robust_train.evaluation.verdict import budget_line

__all__ = ["evaluate_on_split"]


def _check_settings_fit(
    settings: EvaluationSettings, dm: Any
) -> tuple[EvaluationSettings, tuple[int, ...]]:
    """`settings.resolved` on the image size a datamodule states before setup (ValueError
    naming the setting, such as `k` larger than the image), and that size; the settings as
    they are and () when it states none."""
    try:
        size = tuple(getattr(dm, "image_size", None) or ())
    except Exception:  # noqa: BLE001 - a size known only after setup: checked there
        return settings, ()
    if len(size) == 2 and all(isinstance(n, int) and n > 0 for n in size):
        return settings.resolved(*size), size
    return settings, ()


def plan_lines(settings: EvaluationSettings, shape: torch.Size) -> str:
    """What an evaluation of images of `shape` (B, C, H, W) is about to run: its budget and
    protocol (`budget_line`) and the work it plans per image (`total_work`, in attack steps:
    random-sign draws, search queries, samples and forwards weighed by their cost; what the
    progress line's time left is counted in).

    Examples:
        >>> s = EvaluationSettings(parts=("lipschitz",), explainers=("saliency",),
        ...                        lipschitz_samples=3)
        >>> print(plan_lines(s, torch.Size([10, 1, 8, 8])).splitlines()[1])
        planned: 0.8 attack steps of work per image, 8 in all
    """
    parts = build_parts(settings, *shape[-2:])
    resolved = parts[0].settings if parts else settings
    named = {k: list(v) if isinstance(v, tuple) else v for k, v in resolved.as_dict().items()}
    per_image = total_work(parts, 1)
    return (
        f"{budget_line(named, shape[0])}\nplanned: {per_image:,.{1 if per_image < 10 else 0}f} "
        f"attack steps of work per image, {per_image * shape[0]:,.0f} in all"
    )


def evaluate_on_split(
    model: nn.Module,
    data: dict[str, Any] | LightningDataModule,
    settings: EvaluationSettings,
    split: str,
    *,
    progress: bool = True,
    threads: int | None = None,
    where: str = "the data config",
    device: torch.device | str = "cpu",
) -> dict[str, Any]:
    """The suite on `settings.n_samples` images of a split (a seeded class-stratified subset,
    seeded with `settings.seed`), after the probe; one torch thread for small models unless
    `threads` says. The model and the images are moved to `device` (the whole split's accuracy
    is computed there too). `result["subset"]` says which images (`HeldOut.describe`). The
    settings that depend on the image size (`k`, ...) are checked on the datamodule's
    `image_size` before any data is loaded, and resolved there once: the images of that size
    are evaluated with those settings. A datamodule with ground-truth masks (`heldout_masks`)
    adds the localisation of the clean and the attacked maps."""
    data = instantiate(data, where) if isinstance(data, dict) else data
    resolved, size = _check_settings_fit(settings, data)
    device = torch.device(device)
    model = model.to(device)
    set_threads(model, threads)
    held = heldout_subset(
        data, settings.n_samples, split, model=model, seed=settings.seed, where=where
    )
    print(f"evaluating {held.sentence(split)} on {device}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    images, labels = held.images.to(device), held.labels.to(device)
    masks = heldout_masks(data, split, held)
    if size and tuple(images.shape[-2:]) == size:
        settings = resolved  # resolved for these images: passed on as it is
    print(plan_lines(settings, images.shape), file=sys.stderr, flush=True)
    result = evaluate_classifier(model, images, labels, settings, progress=progress, masks=masks)
    if held.accuracy is not None:
        result["measures"]["split_accuracy"] = held.accuracy
    result["subset"] = held.describe()
    result["evaluation_seconds"] = time.perf_counter() - start
    return result
