"""MIF/LIF perturbation curves and the fidelity estimate of Brocki & Chung, "Fidelity of
Interpretability Methods and Perturbation Artifacts in Neural Networks" (arXiv 2203.02928).

Pixels (or square patches) are removed in order of importance, most important first (MIF) or least
important first (LIF), and the model's score for the explained class is recorded after each step.
Removal itself creates artifacts that lower the score in both orders; the area between the curves,
AUC_LIF - AUC_MIF, cancels them (a random map scores about 0).

Design decisions:
- Steps: fractions k / n_steps for k = 0, ..., n_steps (S = n_steps + 1 points, 0 and 1 both
  included, so the area covers the whole [0, 1] axis and does not depend on n_steps);
  `include_end=False` gives the paper's 0%, 5%, ..., 95% for n_steps = 20. Step k removes
  round(k * N / n_steps) of the N units (pixels or patches).
- Ties: a stable sort, so equal importance goes by row-major index in both orders; a constant
  map therefore gives identical MIF and LIF curves (estimate exactly 0).
- A (B, H, W) map is used as given (signed values order by value); a (B, C, H, W) explanation is
  reduced with `importance_map` (sum over channels of |E|, as Ghorbani et al. and the paper).
- All channels of a removed pixel are replaced. Every perturbed image of every step and both
  orders is one row of a virtual batch forwarded in chunks of `internal_batch_size`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from robust_train.core.options import build_options, takes_options
from robust_train.core.runtime import auto_chunk, make_generator
from robust_train.core.validation import (
    check_bool,
    check_choice,
    check_finite,
    check_images,
    check_positive,
    check_target,
)
from robust_train.explain.maps import importance_map
from robust_train.metrics.functional._fidelity_rows import (
    PERTURBATIONS,
    RemovalBaseline,
    RemovalMasks,
    RemovalOptions,
    forward_chunks,
    pixel_map,
    removal_baseline,
    removal_masks,
    score_rows,
    scores_of,
)

SCORES = ("normalized_probability", "probability", "logit", "accuracy")

__all__ = [
    "FidelityCurves",
    "PERTURBATIONS",
    "RemovalOptions",
    "SCORES",
    "fidelity_curves",
    "fidelity_estimate",
]


class FidelityCurves(NamedTuple):
    """Perturbation curves: `fractions` (S,) removed, `mif` and `lif` scores (B, S)."""

    fractions: Tensor
    mif: Tensor
    lif: Tensor


@takes_options(RemovalOptions)
def fidelity_curves(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor | None = None,
    importance: Tensor | None = None,
    *,
    n_steps: int = 20,
    include_end: bool = True,
    patch_size: int = 1,
    mean: Tensor | float | None = None,
    blur_sigma: float = 2.0,
    score: str = "normalized_probability",
    **removal: Any,
) -> FidelityCurves:
    """MIF and LIF curves for every image (Brocki & Chung 2022).

    Args:
        model: classifier returning logits (B, K); run without gradients, mode left as is.
        inputs: images (B, C, H, W) in [0, 1].
        target: class indices (B,); None explains the predicted class of the clean image.
        importance: map (B, H, W), or explanation (B, C, H, W) / mask (B, 1, H, W) reduced by
            `importance_map`. Required.
        n_steps: number of removal steps n (fractions k / n).
        include_end: also record the fully perturbed image (fraction 1).
        patch_size: side of the square patches removed together; a patch's importance is the sum
            over its pixels (edge patches may be smaller when H or W is not a multiple).
        perturbation: "mean" (per image and channel, or the given `mean`), "zero", "blur"
            (Gaussian, `blur_sigma` pixels), "noise" (U(0, 1), drawn once per image) or
            "imputation" (ROAD noisy linear imputation, noise std `imputation_noise` drawn once per
            image and shared by all steps and orders).
        mean: dataset mean, a float or a (C,) tensor, for perturbation="mean".
        score: "normalized_probability" (softmax probability of the target divided by its clean
            value; default), "probability", "logit" or "accuracy" (1 while argmax == target).
        internal_batch_size: most perturbed images per forward (default: chosen from the image
            size, `robust_train.core.runtime.auto_chunk`: 83 for 28x28, 64 for 32x32).
        generator, seed: randomness for "noise" and "imputation".
        **removal: perturbation, imputation_noise, internal_batch_size, generator, seed (above):
            the fields of `RemovalOptions`, which every perturbation measure takes.

    Returns:
        FidelityCurves(fractions (S,), mif (B, S), lif (B, S)), detached.

    Raises:
        TypeError: `inputs`, `importance` or `target` is not a tensor of the right kind.
        ValueError: malformed images, maps or labels, or a setting out of range (the message
            names the argument and the value).

    Examples:
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
        >>> x = torch.rand(2, 1, 4, 4)
        >>> curves = fidelity_curves(model, x, importance=torch.rand(2, 4, 4), n_steps=4)
        >>> curves.fractions.tolist(), curves.mif.shape, curves.mif[:, 0].tolist()
        ([0.0, 0.25, 0.5, 0.75, 1.0], torch.Size([2, 5]), [1.0, 1.0])
    """
    o = build_options(RemovalOptions, removal, where="fidelity_curves")
    check_images(inputs)
    maps = _importance(importance, inputs)
    mean = _check_curve_arguments(
        n_steps, patch_size, o.perturbation, score, blur_sigma, mean, inputs, include_end
    )
    gen = make_generator(o.generator, o.seed, inputs.device)
    internal_batch_size = o.internal_batch_size or auto_chunk(
        inputs.shape[1:], device=inputs.device
    )
    with torch.no_grad():
        clean_logits = forward_chunks(model, inputs, internal_batch_size)
        if target is None:
            target = clean_logits.argmax(1)
        target = check_target(target, inputs.shape[0], num_classes=clean_logits.shape[1])
        target = target.to(inputs.device)
        clean_prob = clean_logits.softmax(1).gather(1, target[:, None]).squeeze(1)
        masks = removal_masks(maps, patch_size, n_steps, include_end)
        baseline = removal_baseline(
            inputs,
            o.perturbation,
            mean=mean,
            blur_sigma=blur_sigma,
            imputation_noise=o.imputation_noise,
            generator=gen,
        )
        row_scores = _row_scores(model, inputs, target, clean_prob, masks, baseline, score)
        values = score_rows(
            inputs.shape[0] * 2 * masks.active.numel(), internal_batch_size, inputs, row_scores
        )
        curves = scores_of(clean_logits, target, clean_prob, score)[:, None, None]
        curves = curves.repeat(1, 2, masks.counts.numel())
        curves[:, :, masks.active] = values.view(inputs.shape[0], 2, masks.active.numel())
    return FidelityCurves(masks.fractions.to(inputs.dtype), curves[:, 0], curves[:, 1])


def _check_curve_arguments(
    n_steps: int,
    patch_size: int,
    perturbation: str,
    score: str,
    blur_sigma: float,
    mean: Tensor | float | None,
    inputs: Tensor,
    include_end: bool,
) -> Tensor | float | None:
    """Check the curve settings beside the removal options (naming each bad one); return the
    checked `mean`."""
    check_positive(n_steps, "n_steps", integer=True)
    check_positive(patch_size, "patch_size", integer=True)
    check_choice(score, "score", SCORES)
    check_positive(blur_sigma, "blur_sigma")
    mean = _check_mean(mean, perturbation, inputs)
    check_bool(include_end, "include_end")
    return mean


def _row_scores(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    clean_prob: Tensor,
    masks: RemovalMasks,
    baseline: RemovalBaseline,
    score: str,
) -> Callable[[Tensor], Tensor]:
    """Scores of rows of the perturbed batch (image-major, then order MIF/LIF, then step)."""
    n_active = masks.active.numel()

    def row_scores(rows: Tensor) -> Tensor:
        image = rows // (2 * n_active)
        removed = masks.pixels(image, (rows // n_active) % 2, masks.active[rows % n_active])
        logits = baseline.logits(model, inputs, image, removed)
        return scores_of(logits, target[image], clean_prob[image], score)

    return row_scores


def fidelity_estimate(curves: FidelityCurves) -> Tensor:
    """AUC_LIF - AUC_MIF per image (B,), trapezoid rule over the fraction axis (Brocki & Chung).

    Examples:
        >>> f = torch.tensor([0.0, 0.5, 1.0])
        >>> fidelity_estimate(FidelityCurves(f, torch.tensor([[1.0, 0.0, 0.0]]),
        ...                                   torch.tensor([[1.0, 1.0, 0.0]]))).tolist()
        [0.5]
    """
    if not isinstance(curves, tuple) or len(curves) != 3:
        raise TypeError(
            f"`curves` must be FidelityCurves(fractions, mif, lif), got {type(curves).__name__}"
        )
    fractions, mif, lif = curves
    if (
        fractions.dim() != 1
        or mif.dim() != 2
        or mif.shape != lif.shape
        or mif.shape[1] != fractions.numel()
    ):
        raise ValueError(
            f"`curves` must hold fractions (S,), mif (B, S), lif (B, S); got shapes "
            f"{tuple(fractions.shape)}, {tuple(mif.shape)}, {tuple(lif.shape)}"
        )
    return torch.trapezoid(lif - mif, fractions, dim=1)


def _importance(importance: object, inputs: Tensor) -> Tensor:
    if importance is None:
        raise ValueError(
            "`importance` is required: an importance map (B, H, W) or an explanation (B, C, H, W)"
        )
    return pixel_map(importance, inputs, "importance", importance_map)


def _check_mean(mean: object, perturbation: str, inputs: Tensor) -> Tensor | float | None:
    if mean is None:
        return None
    if perturbation != "mean":
        raise ValueError(
            f"`mean` is only used with perturbation='mean', got perturbation={perturbation!r}"
        )
    value = torch.as_tensor(mean, dtype=inputs.dtype)
    if value.numel() not in (1, inputs.shape[1]) or value.dim() > 1:
        raise ValueError(
            f"`mean` must be a float or a ({inputs.shape[1]},) tensor of channel means, "
            f"got shape {tuple(value.shape)}"
        )
    check_finite(value, "mean")
    return value.to(inputs.device)
