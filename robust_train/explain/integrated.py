"""Integrated gradients (Sundararajan, Taly, Yan, "Axiomatic Attribution for Deep Networks",
ICML 2017)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from robust_train.core.runtime import (
    auto_chunk,
    check_optional_positive,
    require_grad_mode,
    row_chunks,
)
from robust_train.core.validation import check_choice, check_finite, check_positive
from robust_train.explain.autograd import input_gradient, prepare_inputs
from robust_train.explain.registry import register_explainer

INTEGRATION_METHODS = (
    "riemann_trapezoid",
    "riemann_left",
    "riemann_right",
    "riemann_middle",
    "gausslegendre",
)


def integration_rule(method: str, n_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Points `alpha` in [0, 1] and weights of a quadrature rule for integrals over [0, 1].

    The weights of every rule sum to 1. "riemann_trapezoid" is the composite trapezoid rule on
    `n_steps` evenly spaced points including both ends (weights 1/(n-1), halved at the ends).
    Note: Captum's "riemann_trapezoid" uses the same points but weights 1/n (halved at the
    ends), which sum to (n-1)/n; its attributions are ours times (n-1)/n.

    Examples:
        >>> alphas, weights = integration_rule("riemann_trapezoid", 3)
        >>> alphas.tolist(), weights.tolist()
        ([0.0, 0.5, 1.0], [0.25, 0.5, 0.25])
    """
    check_choice(method, "method", INTEGRATION_METHODS)
    check_positive(n_steps, "n_steps", integer=True)
    n = n_steps
    if method == "gausslegendre":
        nodes, weights = np.polynomial.legendre.leggauss(n)
        return 0.5 * (nodes + 1.0), 0.5 * weights
    if method == "riemann_trapezoid":
        if n < 2:
            raise ValueError(f"`n_steps` must be >= 2 for method 'riemann_trapezoid', got {n}")
        weights = np.full(n, 1.0 / (n - 1))
        weights[[0, -1]] /= 2
        return np.linspace(0.0, 1.0, n), weights
    offset = {"riemann_left": 0.0, "riemann_right": 1.0, "riemann_middle": 0.5}[method]
    return (np.arange(n) + offset) / n, np.full(n, 1.0 / n)


@register_explainer(
    "integrated_gradients",
    settings={"ig_steps": "n_steps", "ig_baseline": "baseline"},
    reported=True,
)
def integrated_gradients(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    baseline: float | Tensor | None = None,
    n_steps: int = 32,
    method: str = "riemann_trapezoid",
    internal_batch_size: int | None = None,
    create_graph: bool = False,
) -> Tensor:
    """Integrated gradients of the target logit along the straight path from a baseline.

    `IG(x) = (x - x') * integral_0^1 grad f_c(x' + a (x - x')) da`, approximated with the
    quadrature rule `method` on `n_steps` points (Sundararajan et al. 2017). Completeness: the
    attributions of an image sum to about `f_c(x) - f_c(x')`.

    All `n_steps * B` path points form one virtual batch (step-major rows, as Captum) that is
    forwarded in chunks of at most `internal_batch_size` rows. Memory then grows with the chunk,
    not with `n_steps`; the result does not depend on the chunking (up to float rounding).

    Args:
        model: classifier returning logits (B, num_classes); its train/eval mode is left as is
            (in train mode, BatchNorm sees the chunk, so explain in eval mode).
        inputs: images (B, C, H, W).
        target: class indices (B,).
        baseline: None (black image, zeros), a float (constant image), a (C, H, W) tensor shared
            by the batch (e.g. the mean image) or a (B, C, H, W) tensor, one per image.
        n_steps: number of points on the path (>= 2 for "riemann_trapezoid").
        method: one of `INTEGRATION_METHODS`.
        internal_batch_size: at most this many path points per forward; None: chosen from the
            image size (`robust_train.core.runtime.auto_chunk`), rounded down to whole path steps.
        create_graph: keep the graph (double backprop) so the attributions can be differentiated
            with respect to the inputs and the model parameters (attacks, penalties).

    Returns:
        Attributions shaped like `inputs`.

    Raises:
        RuntimeError: called under `torch.inference_mode()`.
        TypeError: `baseline` is neither None, a number nor a floating point tensor, or
            `n_steps` or `internal_batch_size` is not an int.
        ValueError: `method` is not one of `INTEGRATION_METHODS`, `n_steps` is not positive (or
            below 2 for "riemann_trapezoid"), `internal_batch_size` is not positive, or the
            baseline's shape does not fit `inputs`.

    Examples:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
        >>> x, t = torch.rand(2, 1, 2, 2), torch.tensor([0, 2])
        >>> attr = integrated_gradients(model, x, t, n_steps=4, internal_batch_size=3)
        >>> gap = model(x).gather(1, t[:, None]) - model(torch.zeros_like(x)).gather(1, t[:, None])
        >>> torch.allclose(attr.sum(dim=(1, 2, 3)), gap.squeeze(1), atol=1e-5)
        True
    """
    require_grad_mode("integrated_gradients")
    check_optional_positive(internal_batch_size, "internal_batch_size", integer=True)
    alphas_np, weights_np = integration_rule(method, n_steps)
    with torch.enable_grad():
        x, target = prepare_inputs(inputs, target)
        base = _baseline(baseline, x)
        if not create_graph:
            x, base = x.detach(), base.detach()
        alphas = torch.as_tensor(alphas_np, dtype=x.dtype, device=x.device)
        weights = torch.as_tensor(weights_np, dtype=x.dtype, device=x.device)
        batch = x.shape[0]
        delta = x - base
        path_integral = torch.zeros_like(x)
        chunk = internal_batch_size or _path_chunk(x, create_graph)
        for start, stop in row_chunks(n_steps * batch, chunk):
            if start % batch == 0 and stop % batch == 0:  # whole steps: broadcast, no gathers
                steps = (start // batch, stop // batch)
                grads = _whole_steps(
                    model, base, delta, target, alphas, weights, steps, create_graph
                )
                path_integral = path_integral + grads
                continue
            rows = torch.arange(start, stop, device=x.device)
            step, image = rows // batch, rows % batch
            points = base[image] + alphas[step].view(-1, 1, 1, 1) * delta[image]
            if not create_graph:
                points = points.detach().requires_grad_(True)
            grads = input_gradient(model, points, target[image], create_graph=create_graph)
            weighted = grads * weights[step].view(-1, 1, 1, 1)
            path_integral = path_integral.index_add(0, image, weighted)
        attributions = delta * path_integral
    return attributions if create_graph else attributions.detach()


def _path_chunk(x: Tensor, create_graph: bool) -> int:
    """Default path points per forward: `auto_chunk` of one image, in whole path steps (a
    multiple of the batch) when it holds at least one."""
    rows = auto_chunk(x.shape[1:], device=x.device, create_graph=create_graph)
    return rows - rows % x.shape[0] if rows >= x.shape[0] else rows


def _whole_steps(
    model: nn.Module,
    base: Tensor,
    delta: Tensor,
    target: Tensor,
    alphas: Tensor,
    weights: Tensor,
    steps: tuple[int, int],
    create_graph: bool,
) -> Tensor:
    """Weighted sum of the gradients at path steps [first, last) for every image (B, C, H, W)."""
    first, last = steps
    n = last - first
    scale = alphas[first:last].view(-1, 1, 1, 1, 1)
    points = (base.unsqueeze(0) + scale * delta.unsqueeze(0)).reshape(-1, *base.shape[1:])
    if not create_graph:
        points = points.detach().requires_grad_(True)
    grads = input_gradient(model, points, target.repeat(n), create_graph=create_graph)
    step_weights = weights[first:last].view(-1, 1, 1, 1, 1)
    return (grads.view(n, *base.shape) * step_weights).sum(0)


def _baseline(baseline: float | Tensor | None, x: Tensor) -> Tensor:
    """The baseline as a (B, C, H, W) tensor aligned with `x`."""
    if baseline is None:
        return torch.zeros_like(x)
    if isinstance(baseline, (int, float)) and not isinstance(baseline, bool):
        check_finite(torch.tensor(float(baseline)), "baseline")
        return torch.full_like(x, float(baseline))
    if not isinstance(baseline, Tensor):
        raise TypeError(
            f"`baseline` must be None, a float or a tensor, got {type(baseline).__name__}"
        )
    if not baseline.is_floating_point():
        raise TypeError(f"`baseline` must be a floating point tensor, got dtype {baseline.dtype}")
    shape, per_image = tuple(baseline.shape), tuple(x.shape[1:])
    if shape not in (per_image, (1, *per_image), tuple(x.shape)):
        raise ValueError(
            f"`baseline` must have shape {per_image}, {(1, *per_image)} or {tuple(x.shape)} to "
            f"match `inputs`, got shape {shape}"
        )
    check_finite(baseline, "baseline")
    return baseline.to(device=x.device, dtype=x.dtype).expand_as(x)


__all__ = ["integrated_gradients", "integration_rule", "INTEGRATION_METHODS"]
