"""A deterministic certificate of the explanation: bounds on the saliency (or input x gradient)
map that hold at every point of an L_inf ball, and the top-k overlap they certify.

`explanation_bounds` bounds, for every input entry, the explanation E(x') of every x' with
||x' - x||_inf <= epsilon in [0, 1]^d (`robust_train.certify.interval`: interval bounds through
the forward and the backward pass; method ``crown`` first tightens the pre-activation bounds by
linear back-substitution, `robust_train.certify.crown`). Saliency is the gradient of the target
logit; input x gradient multiplies it by x' in [x - eps, x + eps] cap [0, 1] (interval product).
The importance map sum_c |E| is bounded pixel by pixel from |E|'s interval.

`certify_topk` turns those bounds into a certified top-k overlap with `box_overlap`: S is the
top-k set of the exact map at x; the worst overlap over the box (S pixels at their lower bound,
the others at their upper bound, ties against S) is <= |S cap top_k(I(x'))| / k for every x' of
the ball. No probability is involved: the certificate holds for every input of the ball (up to
floating-point rounding in the bound computation).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.certify.bounds import box_overlap
from robust_train.certify.crown import crown_tightener
from robust_train.certify.graph import Step, trace_network
from robust_train.certify.interval import Box, forward_bounds, gradient_bounds, input_box
from robust_train.core.runtime import eval_mode
from robust_train.core.validation import check_images, check_non_negative, check_target
from robust_train.explain.maps import importance_map
from robust_train.explain.registry import resolve_explainer
from robust_train.explain.similarity import topk_mask

__all__ = [
    "BOUND_EXPLAINERS",
    "BOUND_METHODS",
    "DeterministicCertificate",
    "MapBounds",
    "certify_topk",
    "explanation_bounds",
]

BOUND_METHODS = ("interval", "crown")
BOUND_EXPLAINERS = ("saliency", "input_x_gradient")


@dataclass
class MapBounds:
    """Bounds of an explanation over a ball.

    Attributes:
        lower, upper: (B, C, H, W) bounds of E(x') for every x' of the ball.
        importance_lower, importance_upper: (B, H, W) bounds of sum_c |E(x')|.
        stable: (B,) share of the ReLUs whose derivative the bounds fix over the ball.
    """

    lower: Tensor
    upper: Tensor
    importance_lower: Tensor
    importance_upper: Tensor
    stable: Tensor


def check_method(method: object) -> str:
    """Raise unless `method` is one of `BOUND_METHODS`."""
    if method not in BOUND_METHODS:
        raise ValueError(f"`method` must be one of {BOUND_METHODS}, got {method!r}")
    return str(method)


def check_bound_explainer(explainer: object) -> str:
    """Raise unless the explainer is one the bounds cover (`BOUND_EXPLAINERS`)."""
    if explainer not in BOUND_EXPLAINERS:
        raise ValueError(
            f"`explainer` must be one of {BOUND_EXPLAINERS} for the deterministic bounds, "
            f"got {explainer!r}"
        )
    return str(explainer)


def check_epsilon(epsilon: object, name: str = "epsilon") -> float:
    """Raise unless an L_inf radius is a number in [0, 1]."""
    check_non_negative(epsilon, name)
    if not float(epsilon) <= 1:  # type: ignore[arg-type]
        raise ValueError(f"`{name}` must be an L_inf radius in [0, 1], got {epsilon!r}")
    return float(epsilon)  # type: ignore[arg-type]


def explanation_bounds(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    epsilon: float,
    method: str = "interval",
    explainer: str = "saliency",
) -> MapBounds:
    """Bounds of the explanation of every x' with ||x' - x||_inf <= epsilon, x' in [0, 1]^d.

    The model runs with eval-mode semantics (BatchNorm's running statistics, no dropout); its
    flags are restored. Under grad mode the bounds are differentiable in the model's weights
    (`robust_train.regularizers.interval_width` trains on their width).

    Args:
        model: a ReLU network of the layers `trace_network` supports.
        inputs: images (B, C, H, W) in [0, 1].
        target: (B,) class whose logit is explained.
        epsilon: L_inf radius, pixel units.
        method: ``interval`` or ``crown`` (tighter pre-activation bounds).
        explainer: ``saliency`` or ``input_x_gradient``.

    Returns:
        `MapBounds`.

    Raises:
        UnsupportedLayerError: naming a layer the bounds cannot propagate.

    Examples:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
        >>> x = torch.rand(1, 1, 2, 2)
        >>> b = explanation_bounds(net, x, torch.tensor([0]), epsilon=0.0)
        >>> from robust_train.explain import saliency
        >>> torch.allclose(b.lower, saliency(net, x, torch.tensor([0])))
        True
    """
    check_images(inputs, "inputs")
    target = check_target(target, inputs.shape[0]).to(inputs.device)
    check_epsilon(epsilon)
    check_method(method)
    check_bound_explainer(explainer)
    steps = trace_network(model)
    box = input_box(inputs.detach(), epsilon)
    with eval_mode(model):
        tighten = crown_tightener(steps) if method == "crown" else None
        env = forward_bounds(steps, box, tighten)
        grad = gradient_bounds(steps, env, target)
    if explainer == "input_x_gradient":
        grad = _product(box, grad)
    low, high = _absolute(grad)
    return MapBounds(grad.lower, grad.upper, low.sum(1), high.sum(1), _stable_share(steps, env))


def _stable_share(steps: list[Step], env: dict[str, Any]) -> Tensor:
    fixed, total = 0.0, 0
    for step in steps:
        if step.kind == "relu":
            box = env[step.args[0]]
            sure = ((box.lower > 0) | (box.upper <= 0)).flatten(1)
            fixed, total = fixed + sure.sum(1).double(), total + sure.shape[1]
    first = env[steps[0].name].lower
    if not total:
        return torch.ones(first.shape[0], dtype=torch.float64, device=first.device)
    return torch.as_tensor(fixed / total, device=first.device)


def _product(a: Box, b: Box) -> Box:
    """Interval product of two boxes."""
    corners = torch.stack(
        [a.lower * b.lower, a.lower * b.upper, a.upper * b.lower, a.upper * b.upper]
    )
    return Box(corners.amin(0), corners.amax(0))


def _absolute(box: Box) -> tuple[Tensor, Tensor]:
    """Bounds of |v| for v in [lower, upper]."""
    low = torch.where(box.lower > 0, box.lower, (-box.upper).clamp_min(0))
    return low, torch.maximum(-box.lower, box.upper)


@dataclass
class DeterministicCertificate:
    """Certified top-k overlap of an explanation at several L_inf radii.

    Attributes:
        reference: bool (B, H, W), the top-k set S of the exact importance map at x.
        epsilons: (E,) L_inf radii; certified_overlap: (B, E), for every x' of each ball at
            least this share of S stays in the top-k of the importance map at x'.
        stable_share: (B, E) share of the ReLUs whose derivative the bounds fix over each ball.
        seconds: (E,) wall time of each radius for the whole batch.
        method, explainer, k: the settings.
    """

    reference: Tensor
    epsilons: Tensor
    certified_overlap: Tensor
    stable_share: Tensor
    seconds: Tensor
    method: str
    explainer: str
    k: int


def certify_topk(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    epsilons: Sequence[float],
    k: int,
    method: str = "interval",
    explainer: str = "saliency",
) -> DeterministicCertificate:
    """Certify the top-k set of the importance map at each L_inf radius (module docstring).

    Args:
        model, inputs, target, method, explainer: as `explanation_bounds`.
        epsilons: L_inf radii.
        k: size of the top-k set (1 <= k <= H * W).

    Returns:
        `DeterministicCertificate`.

    Examples:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))  # a linear model: fixed map
        >>> x = torch.rand(2, 1, 4, 4)
        >>> cert = certify_topk(net, x, torch.tensor([0, 1]), epsilons=[0.0, 0.1], k=4)
        >>> cert.certified_overlap.tolist()
        [[1.0, 1.0], [1.0, 1.0]]
    """
    check_images(inputs, "inputs")
    target = check_target(target, inputs.shape[0]).to(inputs.device)
    radii = [check_epsilon(e, "epsilons") for e in epsilons]
    if not radii:
        raise ValueError("`epsilons` is empty: give at least one L_inf radius")
    explain, _ = resolve_explainer(check_bound_explainer(explainer), differentiable=False)
    with eval_mode(model):
        clean = importance_map(explain(model, inputs, target)).detach()
    reference = topk_mask(clean, k)
    overlap, stable, seconds = [], [], []
    with torch.no_grad():
        for eps in radii:
            start = time.perf_counter()
            b = explanation_bounds(
                model, inputs, target, epsilon=eps, method=method, explainer=explainer
            )
            overlap.append(box_overlap(b.importance_lower, b.importance_upper, reference, k)[0])
            stable.append(b.stable)
            seconds.append(time.perf_counter() - start)
    return DeterministicCertificate(
        reference=reference,
        epsilons=torch.tensor(radii, dtype=torch.float64),
        certified_overlap=torch.stack(overlap, 1).double(),
        stable_share=torch.stack(stable, 1),
        seconds=torch.tensor(seconds, dtype=torch.float64),
        method=method,
        explainer=explainer,
        k=k,
    )
