"""Explanation smoothness / local-Lipschitz penalty (SENN, Alvarez-Melis & Jaakkola 2018; IGR; FAR).

penalty(x) = mean_s d(I(x), I(x'_s)) [/ ||x - x'_s||_2], with I the importance map of a
differentiable explainer computed with create_graph=True, and x'_s sampled uniformly in an L_inf
or L2 ball of `radius` around x, or moved towards the largest distance by a few projected
sign-ascent steps (the adversarial variant, as in FAR/ART, at a few extra double-backprop passes).

The ascent direction is taken on a softplus surrogate of the model (`ascent_beta`): a ReLU
network's gradient map is piecewise constant in x, so the gradient of the map distance with
respect to x' is exactly zero and the ascent would never move (Ghorbani et al. 2019; Dombrowski
et al. 2019). Only the direction uses the surrogate; the penalty is computed on the model itself.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from robust_train._validation import check_choice, check_non_negative, check_positive
from robust_train.explain._autograd import gradient_of_target, target_scores
from robust_train.explain.gradient import input_x_gradient, saliency
from robust_train.explain.maps import importance_map
from robust_train.models.softplus import _RELU_TYPES, count_functional_relus
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
    ascent_beta: float | None = 10.0,
) -> float:
    """The one argument check of the function and its terms; returns the ascent step size."""
    if not isinstance(detach_clean, bool):
        raise TypeError(f"`detach_clean` must be a bool, got {type(detach_clean).__name__}")
    if ascent_beta is not None:
        check_positive(ascent_beta, "ascent_beta")
        if not math.isfinite(ascent_beta):
            raise ValueError(f"`ascent_beta` must be finite (or None), got {ascent_beta!r}")
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
    ascent_beta: float | None = 10.0,
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
        ascent_beta: during the ascent only, every `nn.ReLU`/`nn.ReLU6` module of `model` is
            swapped in place for `nn.Softplus(ascent_beta)` (restored afterwards), so that the
            direction is not the exact zero of a piecewise-linear network; None: the model
            itself. Functional ReLUs (`F.relu` in forward) are not reached; when the direction
            is zero for the whole batch, a warning names the cause.
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
    value, zero_cause = _smoothness(
        model,
        inputs,
        target,
        explainer=explainer,
        radius=radius,
        n_samples=n_samples,
        ball=ball,
        distance=distance,
        lipschitz=lipschitz,
        n_ascent_steps=n_ascent_steps,
        ascent_step_size=ascent_step_size,
        ascent_beta=ascent_beta,
        detach_clean=detach_clean,
        logits=logits,
        generator=generator,
    )
    if zero_cause is not None:
        warnings.warn(zero_cause, RuntimeWarning, stacklevel=2)
    return value


def _smoothness(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    explainer: str | Explainer,
    radius: float,
    n_samples: int,
    ball: str,
    distance: str,
    lipschitz: bool,
    n_ascent_steps: int,
    ascent_step_size: float | None,
    ascent_beta: float | None,
    detach_clean: bool,
    logits: Tensor | None,
    generator: torch.Generator | None,
    check_zero: bool = True,
) -> tuple[Tensor, str | None]:
    """`explanation_smoothness`, and why its ascent direction was zero (None when it moved, when
    there was no ascent or when `check_zero` is False)."""
    step = check_smoothness_args(
        radius,
        n_samples,
        ball,
        distance,
        n_ascent_steps,
        ascent_step_size,
        detach_clean,
        ascent_beta,
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
    zero_cause = None
    if n_ascent_steps:
        with relus_as_softplus(model, ascent_beta) as n_swapped:
            for i in range(n_ascent_steps):
                delta, g = _ascent_step(
                    model,
                    explain,
                    x0_rep,
                    target_rep,
                    delta,
                    reference,
                    distance,
                    step,
                    radius,
                    ball,
                )
                if i == 0 and check_zero and not bool(g.any()):
                    zero_cause = _zero_direction_cause(model, ascent_beta, n_swapped, reference)
    x_pert = (x0_rep + delta).clamp(0, 1)
    pert_map = importance_map(explain(model, x_pert, target_rep, create_graph=True))
    dist = map_distance(clean_map.repeat(n_samples, 1, 1), pert_map, distance)
    if lipschitz:
        dist = dist / per_sample_norm(x_pert - x0_rep).clamp_min(1e-12)
    return dist.view(n_samples, b).mean(0), zero_cause


@contextmanager
def relus_as_softplus(model: nn.Module, beta: float | None) -> Iterator[int]:
    """Swap every ReLU module of `model` (`nn.ReLU`, `nn.ReLU6`) for `nn.Softplus(beta)` in place,
    and put the original modules back on exit, also when the body raises; yields the number of
    modules swapped (0 with `beta` None: the model is left alone). No copy of the model is made:
    the parameters, buffers and train/eval mode are the model's own.

    Example:
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
        >>> relu = net[1]
        >>> with relus_as_softplus(net, 10.0) as n:
        ...     n, type(net[1]).__name__
        (1, 'Softplus')
        >>> net[1] is relu
        True
    """
    swapped: list[tuple[nn.Module, str, nn.Module]] = []
    try:
        if beta is not None:
            _swap_relus(model, float(beta), swapped)
        yield len(swapped)
    finally:
        for parent, name, child in reversed(swapped):
            setattr(parent, name, child)


def _swap_relus(
    module: nn.Module, beta: float, swapped: list[tuple[nn.Module, str, nn.Module]]
) -> None:
    for name, child in list(module.named_children()):
        if isinstance(child, _RELU_TYPES):
            setattr(module, name, nn.Softplus(beta=beta))
            swapped.append((module, name, child))
        else:
            _swap_relus(child, beta, swapped)


def _zero_direction_cause(
    model: nn.Module, ascent_beta: float | None, n_swapped: int, clean_map: Tensor
) -> str:
    """Why the first ascent step's direction was exactly zero for the whole batch, in words."""
    head = "the explanation-smoothness ascent direction is zero for the whole batch, so x' "
    head += "stays at its random start and the ascent steps cost time for nothing: "
    bad = [n for n, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
    if bad:
        return (
            head + f"the model has non-finite parameters ({', '.join(bad[:3])}): training diverged"
        )
    flat = clean_map.flatten(1)
    if bool((flat.amax(1) == flat.amin(1)).all()):
        return head + (
            "the clean explanation maps are constant (dead or saturated units): there is no "
            "explanation to move"
        )
    if ascent_beta is None and any(isinstance(m, _RELU_TYPES) for m in model.modules()):
        return head + (
            "the model is piecewise linear (ReLU) and ascent_beta=None, so its gradient map is "
            "piecewise constant in x; set ascent_beta (e.g. 10.0) to take the direction on a "
            "softplus surrogate"
        )
    functional = count_functional_relus(model)
    if functional is None or functional > 0:
        found = "could not be traced" if functional is None else f"calls ReLU {functional} time(s)"
        return head + (
            f"the model {found} functionally (F.relu in forward), which the ReLU-module swap "
            "of ascent_beta cannot reach; use a model with nn.ReLU modules (or a smooth "
            "activation)"
        )
    if n_swapped == 0:
        return head + (
            "the model has no ReLU modules to swap and its explanation map is locally constant "
            "in x (e.g. another piecewise-linear activation); use a model with nn.ReLU modules "
            "and ascent_beta set, or a smooth activation"
        )
    return head + "the gradient vanished on the softplus surrogate (saturation); lower ascent_beta"


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
) -> tuple[Tensor, Tensor]:
    """One projected sign-ascent step on d(I(x), I(x + delta)) with respect to delta only;
    returns the new delta and the gradient it followed."""
    delta = delta.detach().requires_grad_(True)
    with torch.enable_grad():
        pert = importance_map(explain(model, (x0 + delta).clamp(0, 1), target, create_graph=True))
        (g,) = torch.autograd.grad(map_distance(clean_map, pert, distance).sum(), delta)
    if ball == "linf":
        return (delta + step * g.sign()).clamp(-radius, radius).detach(), g
    unit = g / expand_like(per_sample_norm(g).clamp_min(1e-12), g)
    delta = delta + step * unit
    scale = (radius / per_sample_norm(delta).clamp_min(1e-12)).clamp(max=1.0)
    return (delta * expand_like(scale, delta)).detach(), g


@register_penalty("smoothness")
class ExplanationSmoothness(PenaltyTerm):
    """Distance between explanations at x and at x' in a ball (see `explanation_smoothness`).

    When the ascent direction is zero for a whole batch, the term warns once (the cause and what
    to do), not at every step.

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
        ascent_beta: float | None = 10.0,
    ) -> None:
        super().__init__(weight, name, seed)
        check_smoothness_args(
            radius,
            n_samples,
            ball,
            distance,
            n_ascent_steps,
            ascent_step_size,
            detach_clean,
            ascent_beta,
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
            ascent_beta=ascent_beta,
            detach_clean=detach_clean,
        )
        self.warned_zero_direction = False
        # The zero-direction check reads a device value (a GPU sync): only on the first calls.
        self._zero_checks_left = 3

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        value, zero_cause = _smoothness(
            model,
            inputs,
            target,
            logits=logits,
            generator=self.generator,
            check_zero=not self.warned_zero_direction and self._zero_checks_left > 0,
            **self.kwargs,
        )
        self._zero_checks_left -= 1
        if zero_cause is not None:
            self.warned_zero_direction = True
            warnings.warn(f"penalty {self.name!r}: {zero_cause}", RuntimeWarning, stacklevel=2)
        return value


@register_penalty("lipschitz")
class LocalLipschitzPenalty(ExplanationSmoothness):
    """Explanation smoothness divided by ||x - x'||: a penalty on the local Lipschitz ratio.

    Takes the arguments of `ExplanationSmoothness` except `lipschitz` (always True); with
    `detach_clean` the clean map is computed without create_graph; the ascent direction comes
    from a softplus surrogate of beta `ascent_beta` (see `explanation_smoothness`).

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
        ascent_beta: float | None = 10.0,
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
            ascent_beta,
        )
