"""Slow, readable MIF/LIF perturbation curves, one image, one step and one pixel at a time.

Written from Brocki & Chung, "Fidelity of Interpretability Methods and Perturbation Artifacts in
Neural Networks" (arXiv 2203.02928): order the pixels (or square patches) by importance, remove
round(k N / n) of them for k = 0, 1, ..., n (most important first, or least important first),
replace every channel of a removed pixel, and record the score of the explained class.
Ties keep row-major order (Python's sort is stable). Only for tests: no batching at all.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import torch
from torch import Tensor, nn


def _units(importance: Tensor, patch_size: int) -> list[tuple[float, list[tuple[int, int]]]]:
    """Row-major list of (summed importance, pixels) for every square patch."""
    height, width = importance.shape
    units = []
    for top in range(0, height, patch_size):
        for left in range(0, width, patch_size):
            pixels = [
                (i, j)
                for i in range(top, min(top + patch_size, height))
                for j in range(left, min(left + patch_size, width))
            ]
            units.append((sum(float(importance[i, j]) for i, j in pixels), pixels))
    return units


def _score(model: nn.Module, image: Tensor, target: int, clean_prob: float, score: str) -> float:
    logits = model(image[None])[0]
    if score == "logit":
        return float(logits[target])
    if score == "accuracy":
        return float(int(logits.argmax()) == target)
    prob = float(torch.softmax(logits, 0)[target])
    return prob if score == "probability" else prob / clean_prob


def _quantus_imputation(image: Tensor, removed: list[tuple[int, int]]) -> Tensor:
    """ROAD linear imputation (no noise) with Quantus' scipy sparse solver."""
    from quantus.functions.perturb_func import noisy_linear_imputation

    width = image.shape[2]
    indices = np.array([i * width + j for i, j in removed])
    out = noisy_linear_imputation(image.double().numpy(), indices, noise=0.0)
    return torch.as_tensor(out, dtype=image.dtype)


@torch.no_grad()
def reference_curves(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor | None,
    importance: Tensor,
    *,
    n_steps: int,
    include_end: bool = True,
    patch_size: int = 1,
    fill: str | Tensor = "mean",
    score: str = "normalized_probability",
) -> tuple[Tensor, Tensor, Tensor]:
    """(fractions (S,), mif (B, S), lif (B, S)).

    `fill`: "mean", "zero", "imputation" or replacement values (B, C, H, W).
    """
    n_points = n_steps + 1 if include_end else n_steps
    fractions = torch.tensor([k / n_steps for k in range(n_points)])
    mif_rows, lif_rows = [], []
    for b in range(inputs.shape[0]):
        image = inputs[b]
        channels = image.shape[0]
        clean_logits = model(image[None])[0]
        t = int(clean_logits.argmax()) if target is None else int(target[b])
        clean_prob = float(torch.softmax(clean_logits, 0)[t])
        units = _units(importance[b], patch_size)
        n_units = len(units)
        most_first = sorted(range(n_units), key=lambda u: -units[u][0])
        least_first = sorted(range(n_units), key=lambda u: units[u][0])
        for order, rows in ((most_first, mif_rows), (least_first, lif_rows)):
            curve = []
            for k in range(n_points):
                n_removed = math.floor(Fraction(k * n_units, n_steps) + Fraction(1, 2))
                removed = [pixel for u in order[:n_removed] for pixel in units[u][1]]
                perturbed = image.clone()
                if isinstance(fill, str) and fill == "imputation":
                    if removed:
                        perturbed = _quantus_imputation(image, removed)
                else:
                    for i, j in removed:
                        for c in range(channels):
                            if isinstance(fill, Tensor):
                                perturbed[c, i, j] = fill[b, c, i, j]
                            elif fill == "mean":
                                perturbed[c, i, j] = image[c].mean()
                            else:
                                perturbed[c, i, j] = 0.0
                curve.append(_score(model, perturbed, t, clean_prob, score))
            rows.append(curve)
    return fractions, torch.tensor(mif_rows), torch.tensor(lif_rows)
