"""Explanation smoothness / local-Lipschitz penalty (SENN, Alvarez-Melis & Jaakkola 2018; IGR; FAR).

penalty(x) = mean_s d(I(x), I(x'_s)) [/ ||x - x'_s||_2], with I the importance map of a
differentiable explainer computed with create_graph=True, and x'_s sampled uniformly in an L_inf
or L2 ball of `radius` around x, or moved towards the largest distance by a few projected
sign-ascent steps (the adversarial variant, as in FAR/ART, at a few extra double-backprop passes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from robust_train._validation import check_choice, check_non_negative, check_positive
from robust_train.explain._autograd import gradient_of_target, target_scores
from robust_train.explain.gradient import input_x_gradient, saliency
from robust_train.explain.maps import importance_map
from robust_train.regularizers._common import (
    BALLS,
    DISTANCES,
    expand_like,
    map_distance,
    per_sample_norm,
    sample_in_ball,
)
from robust_train.regularizers.base import PenaltyTerm, register_penalty

Explainer = Callable[..., Tensor]


def resolve_explainer(explainer: str | Explainer) -> Explainer:
    """A registered explainer name, or a callable, as a differentiable callable (the project's
    one resolver, `robust_train.explain.resolve_explainer`; kept here for old imports)."""
    from robust_train.explain import resolve_explainer as resolve

    return resolve(explainer, differentiable=True, name="explainer")[0]


def check_smoothness_args(
    radius: float,
    n_samples: int,
    ball: str,
    distance: str,
    n_ascent_steps: int,
    ascent_step_size: float | None,
    detach_clean: bool = False,
) -> float:
    """The one argument check of the function and its terms; returns the ascent step size."""
    if not isinstance(detach_clean, bool):
        raise TypeError(f"`detach_clean` must be a bool, got {type(detach_clean).__name__}")
    check_positive(radius, "radius")
    check_positive(n_samples, "n_samples", integer=True)
    check_non_negative(n_ascent_steps, "n_ascent_steps", integer=True)
    check_choice(ball, "ball", BALLS)
    check_choice(distance, "distance", DISTANCES)
    step = radius / 2 if ascent_step_size is None else ascent_step_size
    check_positive(step, "ascent_step_size")
    return step


def _clean_explanation(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    logits: Tensor | None,
    explainer: Explainer,
    detach: bool = False,
) -> Tensor:
    """E(x) with create_graph (or detached), reusing the task loss's forward for the gradient
    explainers."""
    if logits is not None and inputs.requires_grad and explainer in (saliency, input_x_gradient):
        if detach:
            scores = target_scores(logits, target).sum()
            (grad,) = torch.autograd.grad(scores, inputs, retain_graph=True)
            return (grad if explainer is saliency else inputs * grad).detach()
        grad = gradient_of_target(logits, inputs, target, create_graph=True)
        return grad if explainer is saliency else inputs * grad
    if detach:
        return explainer(model, inputs.detach(), target, create_graph=False).detach()
    return explainer(model, inputs, target, create_graph=True)


def explanation_smoothness(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    explainer: str | Explainer = "saliency",
    radius: float = 0.1,
    n_samples: int = 1,
    ball: str = "linf",
    distance: str = "l1",
    lipschitz: bool = False,
    n_ascent_steps: int = 0,
    ascent_step_size: float | None = None,
    detach_clean: bool = False,
    logits: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Per-sample distance between the explanation at x and at nearby x', shape (B,).

    Args:
        model: the classifier being trained.
        inputs: images (B, C, H, W); when they require grad and `logits` = model(inputs) is given,
            the clean saliency reuses that forward.
        target: class indices whose explanation is regularised (the labels, in training).
        explainer: any differentiable explainer or its name.
        radius: size of the ball around x (pixel units of [0, 1] images).
        n_samples: perturbed copies per input, all explained in one batched call.
        ball: "linf" or "l2".
        distance: "l1" (sum-normalised maps), "cosine" (1 - cosine) or "l2" (max-normalised).
        lipschitz: divide each distance by ||x - x'||_2 (local Lipschitz ratio).
        n_ascent_steps: projected sign-ascent steps on the distance before the final evaluation
            (0 = random samples only). The ascent point x' is detached.
        ascent_step_size: step of the ascent (default radius / 2).
        detach_clean: compute the clean map without create_graph, so the gradient flows through
            the perturbed map only (no double backprop through I(x); less memory).
        logits: the clean forward, when the caller already ran it.
        generator: RNG for the samples (CPU generator).

    Example:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3),
        ...                           torch.nn.Softplus(), torch.nn.Linear(3, 2))
        >>> x, y = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 0, 1])
        >>> explanation_smoothness(net, x, y, radius=0.05, n_samples=2).shape
        torch.Size([4])
    """
    step = check_smoothness_args(
        radius, n_samples, ball, distance, n_ascent_steps, ascent_step_size, detach_clean
    )
    explain = resolve_explainer(explainer)
    b = inputs.shape[0]

    clean_map = importance_map(
        _clean_explanation(model, inputs, target, logits, explain, detach_clean)
    )
    x0 = inputs.detach()
    x0_rep = x0.repeat(n_samples, 1, 1, 1)
    target_rep = target.repeat(n_samples)
    delta = sample_in_ball(x0, radius, n_samples, ball, generator)
    reference = clean_map.detach().repeat(n_samples, 1, 1)
    for _ in range(n_ascent_steps):
        delta = _ascent_step(
            model, explain, x0_rep, target_rep, delta, reference, distance, step, radius, ball
        )
    x_pert = (x0_rep + delta).clamp(0, 1)
    pert_map = importance_map(explain(model, x_pert, target_rep, create_graph=True))
    dist = map_distance(clean_map.repeat(n_samples, 1, 1), pert_map, distance)
    if lipschitz:
        dist = dist / per_sample_norm(x_pert - x0_rep).clamp_min(1e-12)
    return dist.view(n_samples, b).mean(0)


def _ascent_step(
    model: nn.Module,
    explain: Explainer,
    x0: Tensor,
    target: Tensor,
    delta: Tensor,
    clean_map: Tensor,
    distance: str,
    step: float,
    radius: float,
    ball: str,
) -> Tensor:
    """One projected sign-ascent step on d(I(x), I(x + delta)) with respect to delta only."""
    delta = delta.detach().requires_grad_(True)
    with torch.enable_grad():
        pert = importance_map(explain(model, (x0 + delta).clamp(0, 1), target, create_graph=True))
        (g,) = torch.autograd.grad(map_distance(clean_map, pert, distance).sum(), delta)
    if ball == "linf":
        return (delta + step * g.sign()).clamp(-radius, radius).detach()
    g = g / expand_like(per_sample_norm(g).clamp_min(1e-12), g)
    delta = delta + step * g
    scale = (radius / per_sample_norm(delta).clamp_min(1e-12)).clamp(max=1.0)
    return (delta * expand_like(scale, delta)).detach()


@register_penalty("smoothness")
class ExplanationSmoothness(PenaltyTerm):
    """Distance between explanations at x and at x' in a ball (see `explanation_smoothness`).

    Example:
        >>> ExplanationSmoothness(weight=0.5, radius=0.2)
        ExplanationSmoothness(name='smoothness', weight=0.5)
    """

    needs_input_grad = True

    def __init__(
        self,
        weight: float = 1.0,
        explainer: str | Explainer = "saliency",
        radius: float = 0.1,
        n_samples: int = 1,
        ball: str = "linf",
        distance: str = "l1",
        lipschitz: bool = False,
        n_ascent_steps: int = 0,
        ascent_step_size: float | None = None,
        name: str | None = None,
        seed: int | None = None,
        detach_clean: bool = False,
    ) -> None:
        super().__init__(weight, name, seed)
        check_smoothness_args(
            radius, n_samples, ball, distance, n_ascent_steps, ascent_step_size, detach_clean
        )
        resolve_explainer(explainer)
        self.kwargs: dict[str, Any] = dict(
            explainer=explainer,
            radius=radius,
            n_samples=n_samples,
            ball=ball,
            distance=distance,
            lipschitz=lipschitz,
            n_ascent_steps=n_ascent_steps,
            ascent_step_size=ascent_step_size,
            detach_clean=detach_clean,
        )

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        return explanation_smoothness(
            model, inputs, target, logits=logits, generator=self.generator, **self.kwargs
        )


@register_penalty("lipschitz")
class LocalLipschitzPenalty(ExplanationSmoothness):
    """Explanation smoothness divided by ||x - x'||: a penalty on the local Lipschitz ratio.

    Takes the arguments of `ExplanationSmoothness` except `lipschitz` (always True); with
    `detach_clean` the clean map is computed without create_graph.

    Example:
        >>> LocalLipschitzPenalty().kwargs["lipschitz"]
        True
    """

    def __init__(
        self,
        weight: float = 0.01,
        explainer: str | Explainer = "saliency",
        radius: float = 0.1,
        n_samples: int = 1,
        ball: str = "linf",
        distance: str = "l1",
        n_ascent_steps: int = 1,
        ascent_step_size: float | None = None,
        name: str | None = None,
        seed: int | None = None,
        detach_clean: bool = False,
    ) -> None:
        super().__init__(
            weight,
            explainer,
            radius,
            n_samples,
            ball,
            distance,
            True,
            n_ascent_steps,
            ascent_step_size,
            name,
            seed,
            detach_clean,
        )
