"""Rows of the perturbed-image batch of the perturbation measures (fidelity curves, faithfulness
correlation): their shared settings, the checked per-pixel map, removal orders and masks, the
baseline of removed pixels (fill and imputation noise), the chunked forward of perturbed rows,
scores."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from robust_train.core.options import check_options, option
from robust_train.core.runtime import check_optional_positive, row_chunks
from robust_train.core.validation import check_choice, check_maps, check_non_negative
from robust_train.metrics.functional._fidelity_fill import constant_fill, linear_imputation

__all__ = [
    "PERTURBATIONS",
    "RemovalBaseline",
    "RemovalMasks",
    "RemovalOptions",
    "forward_chunks",
    "draw_imputation_noise",
    "perturbed_logits",
    "pixel_map",
    "removal_baseline",
    "removal_masks",
    "score_rows",
    "scores_of",
    "unit_importance",
]

PERTURBATIONS = ("mean", "zero", "blur", "noise", "imputation")


@dataclass(frozen=True)
class RemovalOptions:
    """The settings every perturbation measure (`fidelity_curves`, `faithfulness_correlation`)
    takes, declared and checked once: what fills the removed pixels, how many perturbed images
    a forward holds, and the randomness.

    Attributes:
        perturbation: the baseline of removed pixels, one of `PERTURBATIONS` (each measure
            states its default).
        imputation_noise: std of the noise added to imputed pixels ("imputation").
        internal_batch_size: most perturbed images per forward (None: from the image size).
        generator, seed: randomness of "noise" and "imputation" (and of the measure's own
            draws), exclusive.

    Examples:
        >>> RemovalOptions(perturbation="zero").imputation_noise
        0.01
        >>> RemovalOptions(perturbation="black")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: Unknown `perturbation` 'black'; expected one of [...]
    """

    perturbation: str = option("mean", check=partial(check_choice, choices=PERTURBATIONS))
    imputation_noise: float = option(0.01, check=check_non_negative)
    internal_batch_size: int | None = option(
        None, check=partial(check_optional_positive, integer=True)
    )
    generator: torch.Generator | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        check_options(self)


def pixel_map(
    values: object, inputs: Tensor, name: str, reduce: Callable[[Tensor], Tensor]
) -> Tensor:
    """The checked, detached (B, H, W) map of `values`: a map as given, or an explanation
    (B, C, H, W) / mask (B, 1, H, W) reduced over channels by `reduce`; named `name` in errors."""
    if not isinstance(values, Tensor):
        raise TypeError(f"`{name}` must be a tensor, got {type(values).__name__}")
    maps = reduce(values) if values.dim() == 4 else values
    check_maps(maps, name)
    batch, _, height, width = inputs.shape
    if tuple(maps.shape) != (batch, height, width):
        raise ValueError(
            f"`{name}` must cover the images: expected a map ({batch}, {height}, {width}) or an "
            f"explanation ({batch}, C, {height}, {width}) for inputs {tuple(inputs.shape)}, got "
            f"{tuple(values.shape)}"
        )
    return maps.detach()


def draw_imputation_noise(inputs: Tensor, std: float, generator: torch.Generator | None) -> Tensor:
    """Gaussian noise of std `std` like `inputs`, drawn once per image on the generator's device
    (added to imputed pixels, the same for every row of an image)."""
    device = inputs.device if generator is None else torch.device(generator.device)
    noise = torch.randn(inputs.shape, generator=generator, device=device, dtype=inputs.dtype)
    return std * noise.to(inputs.device)


def perturbed_logits(
    model: nn.Module, clean: Tensor, removed: Tensor, fill: Tensor, noise: Tensor | None
) -> Tensor:
    """Logits of `clean` rows with their `removed` (bool, R x 1 x H x W) pixels replaced: by
    `fill` (the rows' constant fill), or, with `noise`, by the noisy linear imputation started
    from the fill's channel means."""
    if noise is None:
        replaced = fill
    else:
        replaced = linear_imputation(clean, removed, fill[:, :, :1, :1]) + noise
    return model(torch.where(removed, replaced, clean))


@dataclass(frozen=True)
class RemovalBaseline:
    """What replaces removed pixels: the constant `fill` (B, C, H, W) and, for "imputation", the
    `noise` (B, C, H, W) added to imputed pixels (drawn once per image, the same for every row)."""

    fill: Tensor
    noise: Tensor | None

    def logits(self, model: nn.Module, inputs: Tensor, image: Tensor, removed: Tensor) -> Tensor:
        """Logits of the rows: image `image[r]` of `inputs` with its `removed[r]` pixels replaced
        (see `perturbed_logits`)."""
        noise = None if self.noise is None else self.noise[image]
        return perturbed_logits(model, inputs[image], removed, self.fill[image], noise)


def removal_baseline(
    inputs: Tensor,
    perturbation: str,
    *,
    mean: Tensor | float | None,
    blur_sigma: float,
    imputation_noise: float,
    generator: torch.Generator | None,
) -> RemovalBaseline:
    """The baseline of `perturbation` for `inputs` (`constant_fill`, then the imputation noise),
    drawn from `generator` in that order."""
    fill = constant_fill(
        inputs, perturbation, mean=mean, blur_sigma=blur_sigma, generator=generator
    )
    noise = None
    if perturbation == "imputation":
        noise = draw_imputation_noise(inputs, imputation_noise, generator)
    return RemovalBaseline(fill, noise)


def score_rows(
    n_rows: int, chunk: int | None, like: Tensor, row_scores: Callable[[Tensor], Tensor]
) -> Tensor:
    """Scores (n_rows,) of a virtual batch of perturbed rows, `chunk` rows at a time:
    `row_scores(rows)` scores the rows of indices `rows` (R,); device and dtype of `like`.

    Examples:
        >>> score_rows(5, 2, torch.zeros(1), lambda rows: rows * 10.0).tolist()
        [0.0, 10.0, 20.0, 30.0, 40.0]
    """
    values = torch.empty(n_rows, device=like.device, dtype=like.dtype)
    for start, stop in row_chunks(n_rows, chunk):
        values[start:stop] = row_scores(torch.arange(start, stop, device=like.device))
    return values


def unit_importance(maps: Tensor, patch_size: int) -> Tensor:
    """Importance per removal unit (B, N): pixels, or sums over square patches (row-major).

    Examples:
        >>> unit_importance(torch.arange(16.0).view(1, 4, 4), 2).tolist()
        [[10.0, 18.0, 42.0, 50.0]]
    """
    if patch_size == 1:
        return maps.flatten(1)
    height, width = maps.shape[1:]
    pad_h, pad_w = -height % patch_size, -width % patch_size
    padded = F.pad(maps, (0, pad_w, 0, pad_h))
    b, hp, wp = padded.shape[0], padded.shape[1] // patch_size, padded.shape[2] // patch_size
    return padded.view(b, hp, patch_size, wp, patch_size).sum((2, 4)).flatten(1)


class RemovalMasks:
    """Which units each (image, order, step) row removes; orders 0 = MIF, 1 = LIF."""

    def __init__(
        self,
        ranks: Tensor,
        counts: Tensor,
        fractions: Tensor,
        patch_size: int,
        height: int,
        width: int,
    ):
        self.ranks = ranks  # (B, 2, N): position of each unit in each removal order
        self.counts = counts  # (S,): units removed at each step
        self.fractions = fractions  # (S,)
        self.active = torch.nonzero(counts > 0).flatten()  # steps that differ from the clean image
        self.patch_size, self.height, self.width = patch_size, height, width

    def pixels(self, image: Tensor, order: Tensor, step: Tensor) -> Tensor:
        """Bool (R, 1, H, W): True where the row's image has its pixels removed."""
        units = self.ranks[image, order] < self.counts[step][:, None]
        p = self.patch_size
        if p == 1:
            return units.view(-1, 1, self.height, self.width)
        hp, wp = -(-self.height // p), -(-self.width // p)
        grid = (
            units.view(-1, 1, hp, 1, wp, 1)
            .expand(-1, 1, hp, p, wp, p)
            .reshape(-1, 1, hp * p, wp * p)
        )
        return grid[:, :, : self.height, : self.width]


def removal_masks(maps: Tensor, patch_size: int, n_steps: int, include_end: bool) -> RemovalMasks:
    """Stable orders of the units of each map and the number removed at each step.

    Examples:
        >>> m = removal_masks(torch.tensor([[[0.1, 0.9], [0.5, 0.5]]]), 1, 2, True)
        >>> m.ranks.tolist(), m.counts.tolist()
        ([[[3, 0, 1, 2], [0, 3, 1, 2]]], [0, 2, 4])
    """
    units = unit_importance(maps, patch_size)
    n_units = units.shape[1]
    positions = torch.arange(n_units, device=maps.device).expand_as(units)
    ranks = []
    for descending in (True, False):
        order = torch.sort(units, dim=1, descending=descending, stable=True).indices
        ranks.append(torch.empty_like(order).scatter_(1, order, positions))
    steps = torch.arange(n_steps + 1 if include_end else n_steps, device=maps.device)
    counts = (2 * steps * n_units + n_steps) // (2 * n_steps)  # round(k N / n), halves up
    fractions = steps.to(torch.get_default_dtype()) / n_steps
    return RemovalMasks(torch.stack(ranks, 1), counts, fractions, patch_size, *maps.shape[1:])


def forward_chunks(model: nn.Module, inputs: Tensor, chunk: int | None) -> Tensor:
    """Logits (B, K) for `inputs`, forwarded `chunk` rows at a time."""
    logits = torch.cat([model(inputs[a:b]) for a, b in row_chunks(inputs.shape[0], chunk)])
    if logits.dim() != 2:
        raise ValueError(
            f"the model must return logits of shape (B, num_classes), got shape "
            f"{tuple(logits.shape)}"
        )
    return logits


def scores_of(logits: Tensor, target: Tensor, clean_prob: Tensor | None, score: str) -> Tensor:
    """Per-row score of the target class (R,): "logit", "accuracy", "probability", or
    "normalized_probability" (the probability divided by the row's `clean_prob`)."""
    if score == "logit":
        return logits.gather(1, target[:, None]).squeeze(1)
    if score == "accuracy":
        return (logits.argmax(1) == target).to(logits.dtype)
    prob = logits.softmax(1).gather(1, target[:, None]).squeeze(1)
    if score == "probability":
        return prob
    assert clean_prob is not None, "normalized_probability needs the clean probability"
    return prob / clean_prob.clamp_min(torch.finfo(prob.dtype).tiny)
