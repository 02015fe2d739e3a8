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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.attacks.options import check_linf_budget
from robust_train.core.balls import project_offset, step_direction
from robust_train.core.options import build_options, takes_options
from robust_train.core.validation import check_choice, check_non_negative, check_positive
from robust_train.explain.clamp import direction_surrogates
from robust_train.explain.maps import importance_map
from robust_train.explain.registry import explainer_spec, resolve_explainer
from robust_train.models.softplus import zero_direction_cause
from robust_train.regularizers._penalty_parts import (
    BALLS,
    DISTANCES,
    map_distance,
    per_sample_norm,
    sample_in_ball,
)
from robust_train.regularizers.base import PenaltyTerm, register_penalty

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
class SmoothnessOptions:
    """The options of the explanation-smoothness family, defined once (the function, the terms
    and their presets take them; a bad value fails when a term is built).

    Attributes:
        explainer: any differentiable explainer or its registered name (saliency, grad_cam, ...).
        radius: size of the ball around x (pixel units of [0, 1] images; L_inf: < 1).
        n_samples: perturbed copies per input, all explained in one batched call.
        ball: "linf" or "l2".
        distance: "l1" (sum-normalised maps), "cosine" (1 - cosine) or "l2" (max-normalised).
        lipschitz: divide each distance by ||x - x'||_2 (local Lipschitz ratio).
        n_ascent_steps: projected sign-ascent steps on the distance before the final evaluation
            (0 = random samples only). The ascent point x' is detached.
        ascent_step_size: step of the ascent (default radius / 2).
        ascent_beta: during the ascent only, every ReLU call of the model (modules and `F.relu`
            alike) computes softplus_ascent_beta (`robust_train.models.softplus.smooth_relus`)
            when the explainer's map is piecewise constant on ReLU nets, so that the direction is
            not the exact zero of a piecewise-linear network, and a map's own final ReLU
            (Grad-CAM's) computes its scale-free softplus surrogate (`robust_train.explain.
            clamp`); None: neither. When the direction is zero for a whole batch, a warning
            names the cause.
        detach_clean: compute the clean map without create_graph, so the gradient flows through
            the perturbed map only (no double backprop through I(x); less memory).
    """

    explainer: str | Explainer = "saliency"
    radius: float = 0.1
    n_samples: int = 1
    ball: str = "linf"
    distance: str = "l1"
    lipschitz: bool = False
    n_ascent_steps: int = 0
    ascent_step_size: float | None = None
    ascent_beta: float | None = 10.0
    detach_clean: bool = field(default=False)

    def __post_init__(self) -> None:
        for name in ("lipschitz", "detach_clean"):
            if not isinstance(getattr(self, name), bool):
                value = getattr(self, name)
                raise TypeError(f"`{name}` must be a bool, got {type(value).__name__}")
        if self.ascent_beta is not None:
            check_positive(self.ascent_beta, "ascent_beta")
            if not math.isfinite(self.ascent_beta):
                raise ValueError(
                    f"`ascent_beta` must be finite (or None), got {self.ascent_beta!r}"
                )
        check_choice(self.ball, "ball", BALLS)
        if self.ball == "linf":
            check_linf_budget(self.radius, "radius")
        else:
            check_positive(self.radius, "radius")
        check_positive(self.n_samples, "n_samples", integer=True)
        check_non_negative(self.n_ascent_steps, "n_ascent_steps", integer=True)
        check_choice(self.distance, "distance", DISTANCES)
        check_positive(self.step, "ascent_step_size")
        resolve_explainer(self.explainer, differentiable=True)

    @property
    def step(self) -> float:
        """The ascent step: `ascent_step_size`, else radius / 2."""
        return self.radius / 2 if self.ascent_step_size is None else self.ascent_step_size


def _clean_explanation(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    logits: Tensor | None,
    explainer: Explainer,
    detach: bool = False,
) -> Tensor:
    """E(x) with create_graph (or detached), computed from the task loss's forward when the
    explainer can be (`ExplainerSpec.from_logits`: saliency, input x gradient)."""
    from_logits = explainer_spec(explainer).from_logits
    if logits is not None and inputs.requires_grad and from_logits is not None:
        if detach:
            return from_logits(logits, inputs, target, False).detach()
        return from_logits(logits, inputs, target, True)
    if detach:
        return explainer(model, inputs.detach(), target, create_graph=False).detach()
    return explainer(model, inputs, target, create_graph=True)


@takes_options(SmoothnessOptions)
def explanation_smoothness(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    logits: Tensor | None = None,
    generator: torch.Generator | None = None,
    **options: Any,
) -> Tensor:
    """Per-sample distance between the explanation at x and at nearby x', shape (B,).

    Args:
        model: the classifier being trained.
        inputs: images (B, C, H, W); when they require grad and `logits` = model(inputs) is given,
            the clean map of an explainer that can reuse a forward (`ExplainerSpec.from_logits`)
            reuses that one.
        target: class indices whose explanation is regularised (the labels, in training).
        logits: the clean forward, when the caller already ran it.
        generator: RNG for the samples (CPU generator).
        **options: the fields of `SmoothnessOptions` (explainer, radius, n_samples, ball,
            distance, lipschitz, n_ascent_steps, ascent_step_size, ascent_beta, detach_clean).

    Examples:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3),
        ...                           torch.nn.Softplus(), torch.nn.Linear(3, 2))
        >>> x, y = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 0, 1])
        >>> explanation_smoothness(net, x, y, radius=0.05, n_samples=2).shape
        torch.Size([4])
    """
    o = build_options(SmoothnessOptions, options, where="explanation_smoothness")
    value, zero_cause = _smoothness(model, inputs, target, o, logits=logits, generator=generator)
    if zero_cause is not None:
        warnings.warn(zero_cause, RuntimeWarning, stacklevel=2)
    return value


def _smoothness(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    o: SmoothnessOptions,
    *,
    logits: Tensor | None,
    generator: torch.Generator | None,
    check_zero: bool = True,
) -> tuple[Tensor, str | None]:
    """`explanation_smoothness`, and why its ascent direction was zero (None when it moved, when
    there was no ascent or when `check_zero` is False)."""
    explain = resolve_explainer(o.explainer, differentiable=True)[0]
    b, n = inputs.shape[0], o.n_samples
    clean_map = importance_map(
        _clean_explanation(model, inputs, target, logits, explain, o.detach_clean)
    )
    x0 = inputs.detach()
    x0_rep, target_rep = x0.repeat(n, 1, 1, 1), target.repeat(n)
    delta = sample_in_ball(x0, o.radius, n, o.ball, generator)
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
    spec = explainer_spec(explain)
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

    def __init__(
        self, weight: float = 1.0, name: str | None = None, seed: int | None = None, **options: Any
    ) -> None:
        super().__init__(weight, name, seed, **options)
        # The zero-direction check reads a device value (a GPU sync): on the first call only.
        self.checked_zero_direction = False

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        value, zero_cause = _smoothness(
            model,
            inputs,
            target,
            self.options,
            logits=logits,
            generator=self.generator,
            check_zero=not self.checked_zero_direction,
        )
        self.checked_zero_direction |= bool(self.options.n_ascent_steps)
        if zero_cause is not None:
            warnings.warn(f"penalty {self.name!r}: {zero_cause}", RuntimeWarning, stacklevel=2)
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
