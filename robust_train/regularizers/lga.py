"""LGA, Local Gradient Alignment (Joo, Jeong, Heo, Weller, Moon: "Towards More Robust
Interpretation via Local Gradient Alignment", AAAI 2023, arXiv 2211.15900; code
joshua840/RobustAGA, `project/module/pl_l2_plus_cosd_classifier.py`).

penalty(x) = l2_weight * ||g(x) - g(x')||_2^2 + cos_weight * (1 - cos(g(x), g(x'))) / 2,

with g the gradient of the target logit with respect to the input (the signed saliency map),
x' = x + delta for ONE delta drawn uniformly from the L_inf ball of `radius` (no inner
attack), and g(x) detached by default (the authors' `detach_source_grad=True`), so the
gradient flows through g(x') only: one double-backprop pass per step. The squared l2 term
alone lets the gradient shrink instead of turning; the cosine term alone ignores its size; the
paper combines both (its CIFAR-10 scripts: eps 4/255, lamb_l2 0.01, lamb_cos 0.1 or 1.0).

Why not a preset of the explanation-smoothness term: that term compares importance maps
(|E| summed over channels, normalised by their sum or max) with one distance, while LGA
compares the raw signed gradients, unnormalised, with a weighted sum of two distances.
Deviation from the authors' code: x' is clipped to [0, 1] (the project's images and attacks
live there; the authors perturb in normalised space without clipping).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from robust_train.attacks.options import check_linf_budget
from robust_train.core.options import check_options, option, takes_options
from robust_train.core.validation import check_bool, check_non_negative
from robust_train.explain import saliency
from robust_train.explain.autograd import gradient_of_target
from robust_train.regularizers._penalty_parts import sample_in_ball
from robust_train.regularizers.base import PenaltyTerm, register_penalty
from robust_train.regularizers.options import PenaltyCall, penalty_function

__all__ = ["LGAOptions", "LocalGradientAlignment", "local_gradient_alignment"]


@dataclass(frozen=True)
class LGAOptions:
    """The options of LGA, defined once (the function and the term take them).

    Attributes:
        radius: L_inf radius of the uniform perturbation (pixel units of [0, 1] images, < 1;
            default the authors' 4/255).
        l2_weight: weight of the squared l2 distance between the two gradients (lamb_l2).
        cos_weight: weight of the cosine distance (1 - cos) / 2 (lamb_cos).
        detach_clean: g(x) without a graph (the authors' default): gradients flow through g(x')
            only. False differentiates through both.
    """

    radius: float = option(4 / 255, check=check_linf_budget)
    l2_weight: float = option(1.0, check=check_non_negative)
    cos_weight: float = option(1.0, check=check_non_negative)
    detach_clean: bool = option(True, check=check_bool)

    def __post_init__(self) -> None:
        check_options(self)


@penalty_function(LGAOptions, logits=True)
def local_gradient_alignment(call: PenaltyCall[LGAOptions]) -> Tensor:
    """The LGA penalty per image (B,), differentiable with respect to the parameters.

    With the caller's `logits`, g(x) is taken from that forward (no second clean forward).

    Examples:
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 8),
        ...                           torch.nn.Softplus(), torch.nn.Linear(8, 3))
        >>> x, y = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 2, 0])
        >>> local_gradient_alignment(net, x, y, radius=0.1).shape
        torch.Size([4])
    """
    model, inputs, target, o = call.model, call.inputs, call.target, call.options
    logits = call.logits
    with torch.enable_grad():
        if logits is not None and inputs.requires_grad:
            clean = gradient_of_target(
                logits, inputs, target, create_graph=not o.detach_clean, retain_graph=True
            )
        else:
            x = inputs if not o.detach_clean else inputs.detach()
            clean = saliency(model, x, target, create_graph=not o.detach_clean)
        if o.detach_clean:
            clean = clean.detach()
        x0 = inputs.detach()
        delta = sample_in_ball(x0, o.radius, 1, "linf", call.generator)
        perturbed = saliency(model, (x0 + delta).clamp(0, 1), target, create_graph=True)
    a, b = clean.flatten(1), perturbed.flatten(1)
    l2 = (a - b).pow(2).sum(1)
    cos_distance = (1 - F.cosine_similarity(a, b, dim=1)) / 2
    return o.l2_weight * l2 + o.cos_weight * cos_distance


@register_penalty("lga")
@takes_options(LGAOptions)
class LocalGradientAlignment(PenaltyTerm):
    """Local Gradient Alignment (Joo et al., AAAI 2023); see `local_gradient_alignment`.

    Args:
        weight, name, seed: as every `PenaltyTerm` (the seed draws the perturbations).
        **options: the fields of `LGAOptions`.

    Examples:
        >>> term = LocalGradientAlignment(radius=0.3, l2_weight=0.01, cos_weight=1.0)
        >>> term.options.radius, term.options.detach_clean
        (0.3, True)
    """

    needs_input_grad = True  # g(x) from the task loss's forward
    double_backprop = True  # g(x') with create_graph=True
    options_class = LGAOptions
    function = staticmethod(local_gradient_alignment)
