"""Slow, readable reference explainers written from the papers: one image, one point at a time.

Used to check the batched, chunked implementations in robust_train.explain.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def gradient_at(model: nn.Module, image: Tensor, label: int) -> Tensor:
    """d logit_label / d image for a single image (C, H, W)."""
    point = image.detach().clone().requires_grad_(True)
    logit = model(point[None])[0, label]
    (grad,) = torch.autograd.grad(logit, point)
    return grad


def reference_integrated_gradients(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    baseline: Tensor,
    alphas: list[float],
    weights: list[float],
) -> Tensor:
    """IG(x) = (x - x') * sum_k w_k grad f(x' + a_k (x - x')) (Sundararajan et al. 2017, eq. 3)."""
    out = []
    for image, base, label in zip(inputs, baseline, target.tolist(), strict=True):
        integral = torch.zeros_like(image)
        for alpha, weight in zip(alphas, weights, strict=True):
            integral += weight * gradient_at(model, base + alpha * (image - base), label)
        out.append((image - base) * integral)
    return torch.stack(out)


def reference_trapezoid(n_steps: int) -> tuple[list[float], list[float]]:
    """Composite trapezoid rule on [0, 1] with n_steps points: h * (f0/2 + f1 + ... + fn/2)."""
    h = 1.0 / (n_steps - 1)
    alphas = [k * h for k in range(n_steps)]
    weights = [h / 2 if k in (0, n_steps - 1) else h for k in range(n_steps)]
    return alphas, weights


def reference_smoothgrad(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    noise: Tensor,
    sigma: Tensor,
    squared: bool = False,
) -> Tensor:
    """SmoothGrad (Smilkov et al. 2017): mean over s of grad f(x + sigma * z_s).

    `noise` holds the standard normal draws z, shape (B, n_samples, C, H, W).
    """
    out = []
    for image, label, z_image, s in zip(inputs, target.tolist(), noise, sigma, strict=True):
        grads = [gradient_at(model, image + s * z, label) for z in z_image]
        grads = [g * g for g in grads] if squared else grads
        out.append(torch.stack(grads).mean(0))
    return torch.stack(out)
