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

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.core.balls import project_offset, step_direction
from robust_train.core.options import takes_options
from robust_train.core.validation import check_bool, check_choice, check_positive
from robust_train.explain.clamp import direction_surrogates
from robust_train.explain.maps import importance_map
from robust_train.models.softplus import zero_direction_cause
from robust_train.regularizers._penalty_parts import (
    BALLS,
    DISTANCES,
    map_distance,
    per_sample_norm,
    sample_in_ball,
)
from robust_train.regularizers.base import PenaltyTerm, register_penalty
from robust_train.regularizers.options import ExplainerOptions, PenaltyCall, penalty_function

__all__ = [
    "ExplanationSmoothness",
    "LocalLipschitzPenalty",
    "SmoothnessOptions",
    "explanation_smoothness",
]

Explainer = Callable[..., Tensor]
ZERO_HEAD = (
    "the explanation-smoothness ascent direction is zero for the whole batch, so x' stays at "
    "its random start and the ascent steps cost time for nothing: "
)


@dataclass(frozen=True)
class SmoothnessOptions(ExplainerOptions):
    """The options of the explanation-smoothness family, defined once (the function, the terms
    and their presets take them; a bad value fails when a term is built). The ascent's options
    and the explainer are `ExplainerOptions`'s (the explainer is resolved once, here).

    Attributes:
        n_samples: perturbed copies per input, all explained in one batched call.
        ball: "linf" or "l2" (the ball of x' and of the ascent's steps; L2: any radius > 0).
        distance: "l1" (sum-normalised maps), "cosine" (1 - cosine) or "l2" (max-normalised).
        lipschitz: divide each distance by ||x - x'||_2 (local Lipschitz ratio).
        detach_clean: compute the clean map without create_graph, so the gradient flows through
            the perturbed map only (no double backprop through I(x); less memory).

    When the ascent direction is zero for a whole batch, a warning names the cause.
    """

    n_samples: int = 1
    ball: str = "linf"
    distance: str = "l1"
    lipschitz: bool = False
    detach_clean: bool = False

    def __post_init__(self) -> None:
        for name in ("lipschitz", "detach_clean"):
            check_bool(getattr(self, name), name)
        super().__post_init__()
        check_positive(self.n_samples, "n_samples", integer=True)
        check_choice(self.distance, "distance", DISTANCES)

    def check_radius(self) -> None:
        """`radius` is an L_inf budget (< 1) in the L_inf ball, any positive size in L2."""
        check_choice(self.ball, "ball", BALLS)
        if self.ball == "linf":
            super().check_radius()
        else:
            check_positive(self.radius, "radius")


def _clean_explanation(
    model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None, o: SmoothnessOptions
) -> Tensor:
    """E(x) with create_graph (or detached: `detach_clean`), computed from the task loss's
    forward when the explainer can be (`ExplainerSpec.from_logits`: saliency, input x gradient)."""
    explainer, detach, from_logits = o.explain, o.detach_clean, o.spec.from_logits
    if logits is not None and inputs.requires_grad and from_logits is not None:
        if detach:
            return from_logits(logits, inputs, target, False).detach()
        return from_logits(logits, inputs, target, True)
    if detach:
        return explainer(model, inputs.detach(), target, create_graph=False).detach()
    return explainer(model, inputs, target, create_graph=True)


@penalty_function(SmoothnessOptions, logits=True)
def explanation_smoothness(call: PenaltyCall[SmoothnessOptions]) -> Tensor:
    """Per-sample distance between the explanation at x and at nearby x', shape (B,).

    The clean map of an explainer that can reuse a forward (`ExplainerSpec.from_logits`)
    reuses the caller's `logits`.

    Examples:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3),
        ...                           torch.nn.Softplus(), torch.nn.Linear(3, 2))
        >>> x, y = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 0, 1])
        >>> explanation_smoothness(net, x, y, radius=0.05, n_samples=2).shape
        torch.Size([4])
    """
    value, zero_cause = _smoothness(call)
    if zero_cause is not None:
        warnings.warn(zero_cause, RuntimeWarning, stacklevel=3)
    return value


def _smoothness(
    call: PenaltyCall[SmoothnessOptions], check_zero: bool = True
) -> tuple[Tensor, str | None]:
    """`explanation_smoothness`, and why its ascent direction was zero (None when it moved, when
    there was no ascent or when `check_zero` is False)."""
    model, inputs, target, o = call.model, call.inputs, call.target, call.options
    explain, b, n = o.explain, inputs.shape[0], o.n_samples
    clean_map = importance_map(_clean_explanation(model, inputs, target, call.logits, o))
    x0 = inputs.detach()
    x0_rep, target_rep = x0.repeat(n, 1, 1, 1), target.repeat(n)
    delta = sample_in_ball(x0, o.radius, n, o.ball, call.generator)
    reference = clean_map.detach().repeat(n, 1, 1)
    zero_cause = None
    if o.n_ascent_steps:
        delta, zero_cause = _ascend(model, explain, x0_rep, target_rep, delta, reference, o)
        zero_cause = zero_cause if check_zero else None
    x_pert = (x0_rep + delta).clamp(0, 1)
    pert_map = importance_map(explain(model, x_pert, target_rep, create_graph=True))
    dist = map_distance(clean_map.repeat(n, 1, 1), pert_map, o.distance)
    if o.lipschitz:
        dist = dist / per_sample_norm(x_pert - x0_rep).clamp_min(1e-12)
    return dist.view(n, b).mean(0), zero_cause


def _ascend(
    model: nn.Module,
    explain: Explainer,
    x0: Tensor,
    target: Tensor,
    delta: Tensor,
    reference: Tensor,
    o: SmoothnessOptions,
) -> tuple[Tensor, str | None]:
    """`n_ascent_steps` steps on the softplus surrogate; the delta reached and, when the first
    step's direction was zero for the whole batch, why."""
    spec = o.spec
    beta = o.ascent_beta if spec.piecewise_constant else None
    cause = None
    with direction_surrogates(o.ascent_beta, spec.piecewise_constant) as relus:
        for i in range(o.n_ascent_steps):
            delta, g = _ascent_step(
                model, explain, x0, target, delta, reference, o.distance, o.step, o.radius, o.ball
            )
            if i == 0 and not bool(g.any()):
                cause = ZERO_HEAD + zero_direction_cause(
                    model,
                    beta=beta,
                    relu_calls=relus.calls,
                    clean_map=reference,
                    piecewise_constant=spec.piecewise_constant,
                    beta_name="ascent_beta",
                )
    return delta, cause


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
    return project_offset(delta + step * step_direction(g, ball), radius, ball).detach(), g


@register_penalty("smoothness")
@takes_options(SmoothnessOptions)
class ExplanationSmoothness(PenaltyTerm):
    """Distance between explanations at x and at x' in a ball (see `explanation_smoothness`).

    When the ascent direction is zero for a whole batch, the term warns once (the cause and what
    to do), not at every step.

    Args:
        weight, name, seed: as every `PenaltyTerm`.
        **options: the fields of `SmoothnessOptions` (defaults: `preset`).

    Examples:
        >>> ExplanationSmoothness(weight=0.5, radius=0.2)
        ExplanationSmoothness(name='smoothness', weight=0.5)
    """

    needs_input_grad = True
    double_backprop = True
    options_class = SmoothnessOptions

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        # The zero-direction check reads a device value (a GPU sync): on the first call only.
        call = PenaltyCall(model, inputs, target, self.options, self.generator, logits)
        value, zero_cause = _smoothness(call, check_zero=self.computed == 0)
        if zero_cause is not None:
            self.warn_once(zero_cause)
        return value


LIPSCHITZ_PRESET = {"lipschitz": True, "n_ascent_steps": 1}


@register_penalty("lipschitz")
@takes_options(SmoothnessOptions, defaults=LIPSCHITZ_PRESET, exclude=("lipschitz",))
class LocalLipschitzPenalty(ExplanationSmoothness):
    """Explanation smoothness divided by ||x - x'||: a penalty on the local Lipschitz ratio.

    A preset of `ExplanationSmoothness`: `lipschitz` is always True, one ascent step by default
    (taken on the softplus surrogate), weight 0.01 by default.

    Examples:
        >>> LocalLipschitzPenalty().options.lipschitz, LocalLipschitzPenalty().weight
        (True, 0.01)
    """

    preset = LIPSCHITZ_PRESET

    def __init__(
        self, weight: float = 0.01, name: str | None = None, seed: int | None = None, **options: Any
    ) -> None:
        if "lipschitz" in options:
            raise TypeError("LocalLipschitzPenalty is the lipschitz=True preset; do not pass it")
        super().__init__(weight, name, seed, **options)
