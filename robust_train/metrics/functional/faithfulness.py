"""Faithfulness correlation (Bhatt, Weller, Moura, "Evaluating and Aggregating Feature-based Model
Explanations", IJCAI 2020, arXiv 2005.00631).

For each image, `n_runs` random subsets S of `subset_size` pixels are replaced by a baseline;
per run, the drop of the model's score for the explained class, f(x) - f(x with S replaced), is
paired with the sum of the attributions over S. The measure is the Pearson correlation of the
two over the runs, in [-1, 1]: a faithful explanation gives large attributions to the pixels
whose removal costs the most. It is a second faithfulness measure beside the fidelity estimate
AUC_LIF - AUC_MIF (`fidelity_curves`): it removes random sets rather than ordered ones, and it
reads the attribution values (signed, as Bhatt et al. and Quantus' default `abs=False`), not
only their ranking.

Design decisions (the same as Quantus' `FaithfulnessCorrelation` where it applies, so the values
coincide on the same subsets): the score is the logit by default (Quantus' `softmax=False`); a
feature is a pixel with all its channels (Quantus: one array element; the same for grey
images), and a (B, C, H, W) explanation is summed over channels, keeping signs; an image whose
runs give a constant drop or a constant attribution sum has no correlation (NaN). Every
perturbed image of every run is one row of a virtual batch forwarded in chunks.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from robust_train.core.options import build_options, takes_options
from robust_train.core.runtime import auto_chunk, make_generator
from robust_train.core.validation import check_choice, check_images, check_positive, check_target
from robust_train.metrics.functional._fidelity_rows import (
    RemovalBaseline,
    RemovalOptions,
    forward_chunks,
    pixel_map,
    removal_baseline,
    score_rows,
    scores_of,
)

__all__ = ["FAITHFULNESS_SCORES", "default_subset_size", "faithfulness_correlation"]

FAITHFULNESS_SCORES = ("logit", "probability")
# Its removal options' defaults that differ from `RemovalOptions`' (Quantus' baseline: black).
REMOVAL_DEFAULTS = {"perturbation": "zero"}


def default_subset_size(height: int, width: int) -> int:
    """|S| when none is given: one eighth of the pixels (98 of 28x28 MNIST, 8 of 8x8 digits).

    Examples:
        >>> default_subset_size(28, 28)
        98
    """
    return max(1, (height * width) // 8)


@takes_options(RemovalOptions, defaults=REMOVAL_DEFAULTS)
def faithfulness_correlation(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    attributions: Tensor,
    *,
    n_runs: int = 100,
    subset_size: int | None = None,
    score: str = "logit",
    subsets: Tensor | None = None,
    **removal: Any,
) -> Tensor:
    """Pearson correlation per image (B,) of score drops and attribution sums over random subsets.

    Args:
        model: classifier returning logits (B, K); run without gradients, mode left as is.
        inputs: images (B, C, H, W) in [0, 1].
        target: explained class indices (B,).
        attributions: (B, H, W) per-pixel values, or an explanation (B, C, H, W) / mask
            (B, 1, H, W), summed over channels (signs kept).
        n_runs: random subsets per image (>= 2).
        subset_size: pixels per subset (default `default_subset_size`: one eighth).
        perturbation: the baseline of removed pixels, as in `fidelity_curves`: "zero" (black,
            the default), "mean" (the image's channel mean), "blur", "noise" (U(0, 1) drawn once
            per image) or "imputation" (ROAD noisy linear imputation).
        imputation_noise: std of the noise added to imputed pixels.
        score: "logit" (default) or "probability" (softmax) of the target class.
        subsets: pixel indices (B, n_runs, subset_size) into the flattened H x W grid, to use
            given subsets (e.g. a peer's) instead of drawing them.
        internal_batch_size: most perturbed images per forward (default from the image size).
        generator, seed: randomness of the subsets and of "noise"/"imputation".
        **removal: perturbation, imputation_noise, internal_batch_size, generator, seed (above):
            the fields of `RemovalOptions`, which every perturbation measure takes.

    Returns:
        (B,) correlations in [-1, 1], NaN where either side is constant over the runs; detached.

    Raises:
        TypeError: `inputs`, `attributions`, `target` or `subsets` is not a tensor of the right
            kind.
        ValueError: malformed images, attributions, labels or subsets, or a setting out of range
            (the message names the argument and the value).

    Examples:
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))
        >>> x, y = torch.rand(2, 1, 4, 4), torch.tensor([0, 2])
        >>> w = model[1].weight[y].view(2, 4, 4)  # a linear model's exact attribution
        >>> r = faithfulness_correlation(model, x, y, x[:, 0] * w, n_runs=20, subset_size=3, seed=0)
        >>> [round(v, 4) for v in r.tolist()]
        [1.0, 1.0]
    """
    where = "faithfulness_correlation"
    o = build_options(RemovalOptions, removal, where=where, defaults=REMOVAL_DEFAULTS)
    check_images(inputs)
    b, _, h, w = inputs.shape
    maps = _per_pixel(attributions, inputs)
    size = default_subset_size(h, w) if subset_size is None else subset_size
    _check_arguments(n_runs, size, h * w, score)
    gen = make_generator(o.generator, o.seed, inputs.device)
    chunk = o.internal_batch_size or auto_chunk(inputs.shape[1:], device=inputs.device)
    if subsets is None:
        subsets = _draw_subsets(b, n_runs, size, h * w, gen, inputs.device)
    else:
        _check_subsets(subsets, (b, n_runs, size), h * w)
        subsets = subsets.to(inputs.device, torch.long)
    with torch.no_grad():
        clean_logits = forward_chunks(model, inputs, chunk)
        target = check_target(target, b, num_classes=clean_logits.shape[1]).to(inputs.device)
        baseline = removal_baseline(
            inputs,
            o.perturbation,
            mean=None,
            blur_sigma=2.0,
            imputation_noise=o.imputation_noise,
            generator=gen,
        )
        perturbed = _perturbed_scores(model, inputs, target, subsets, baseline, score, chunk)
        drops = scores_of(clean_logits, target, None, score)[:, None] - perturbed
        sums = maps.flatten(1).gather(1, subsets.flatten(1)).view(b, n_runs, size).sum(2)
    return pearson_rows(sums, drops)


def pearson_rows(a: Tensor, b: Tensor) -> Tensor:
    """Pearson correlation of each row of `a` with the same row of `b` (B,); NaN for a constant
    row (as scipy.stats.pearsonr).

    Examples:
        >>> pearson_rows(torch.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]]),
        ...              torch.tensor([[2.0, 4.0, 7.0], [0.0, 1.0, 2.0]])).tolist()[1]
        nan
    """
    a = a.double() - a.double().mean(1, keepdim=True)
    b = b.double() - b.double().mean(1, keepdim=True)
    denominator = (a.pow(2).sum(1) * b.pow(2).sum(1)).sqrt()
    r = (a * b).sum(1) / denominator
    r = torch.where(denominator > 0, r.clamp(-1, 1), torch.full_like(r, float("nan")))
    return r.float()


def _perturbed_scores(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    subsets: Tensor,
    baseline: RemovalBaseline,
    score: str,
    chunk: int,
) -> Tensor:
    """Scores (B, R) of every image with each of its subsets removed, `chunk` rows a forward."""
    b, runs, _ = subsets.shape
    _, _, h, w = inputs.shape
    flat = subsets.reshape(b * runs, -1)

    def row_scores(rows: Tensor) -> Tensor:
        image = rows // runs
        removed = torch.zeros(rows.numel(), h * w, dtype=torch.bool, device=inputs.device)
        removed.scatter_(1, flat[rows], True)
        logits = baseline.logits(model, inputs, image, removed.view(-1, 1, h, w))
        return scores_of(logits, target[image], None, score)

    return score_rows(b * runs, chunk, inputs, row_scores).view(b, runs)


def _draw_subsets(
    b: int, runs: int, size: int, n: int, gen: torch.Generator | None, device: torch.device
) -> Tensor:
    """(B, R, S) subsets of range(n) without replacement, one image at a time (memory R x n)."""
    rows = []
    for _ in range(b):
        keys = torch.rand(runs, n, generator=gen, device=gen.device if gen else device)
        rows.append(keys.argsort(1)[:, :size].to(device))
    return torch.stack(rows)


def _per_pixel(attributions: object, inputs: Tensor) -> Tensor:
    """The signed per-pixel map: an explanation's channels summed, signs kept."""
    return pixel_map(attributions, inputs, "attributions", lambda e: e.sum(1))


def _check_arguments(n_runs: int, size: int, n_pixels: int, score: str) -> None:
    check_positive(n_runs, "n_runs", integer=True)
    if n_runs < 2:
        raise ValueError(f"`n_runs` must be >= 2 (a correlation over runs), got {n_runs}")
    check_positive(size, "subset_size", integer=True)
    if size >= n_pixels:
        raise ValueError(
            f"`subset_size` must be smaller than the {n_pixels} pixels of an image, got {size}"
        )
    check_choice(score, "score", FAITHFULNESS_SCORES)


def _check_subsets(subsets: object, shape: tuple[int, int, int], n_pixels: int) -> None:
    if not isinstance(subsets, Tensor) or subsets.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"`subsets` must be an integer tensor, got {subsets!r:.80}")
    if tuple(subsets.shape) != shape:
        raise ValueError(f"`subsets` must have shape {shape}, got {tuple(subsets.shape)}")
    if bool((subsets < 0).any()) or bool((subsets >= n_pixels).any()):
        raise ValueError(f"`subsets` must index the {n_pixels} pixels, got values outside")
