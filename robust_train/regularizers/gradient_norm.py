"""Input-gradient norm penalty (Ross & Doshi-Velez 2018; Finlay & Oberman 2019).

double_backprop: ||grad_x CE(x)||_2^2, differentiated through the gradient (double backprop).
finite_difference: ((CE(x + h d) - CE(x)) / h)^2 with d = grad_x CE / ||grad_x CE|| detached: the
directional derivative along the gradient equals its norm, so this approximates the same quantity
with one extra forward and a plain backward.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from robust_train.core.validation import check_choice, check_positive
from robust_train.regularizers._penalty_parts import ce_input_gradient, expand_like, per_sample_norm
from robust_train.regularizers.base import PenaltyTerm, register_penalty

GRADIENT_NORM_METHODS = ("double_backprop", "finite_difference")


def check_gradient_norm_args(method: str, h: float) -> None:
    """The one argument check of `input_gradient_norm` and `InputGradientNorm`."""
    check_choice(method, "method", GRADIENT_NORM_METHODS)
    check_positive(h, "h")


def input_gradient_norm(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    method: str = "double_backprop",
    h: float = 0.01,
    logits: Tensor | None = None,
) -> Tensor:
    """Squared L2 norm of the input gradient of the per-sample cross-entropy, shape (B,).

    Args:
        model: the classifier.
        inputs: images (B, C, H, W) that require grad (when `logits` is given, model(inputs)).
        target: labels (B,).
        method: "double_backprop" or "finite_difference".
        h: step of the finite difference (pixel units).
        logits: the clean forward, when the caller already ran it.

    Examples:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))
        >>> x = torch.rand(3, 1, 2, 2, requires_grad=True)
        >>> v = input_gradient_norm(net, x, torch.tensor([0, 1, 1]))
        >>> v.shape, bool((v >= 0).all())
        (torch.Size([3]), True)
    """
    check_gradient_norm_args(method, h)
    x = inputs if inputs.requires_grad else inputs.detach().requires_grad_(True)
    shared = logits if x is inputs else None
    if method == "double_backprop":
        _, grad = ce_input_gradient(model, x, target, logits=shared, create_graph=True)
        return grad.flatten(1).pow(2).sum(1)
    ce, grad = ce_input_gradient(model, x, target, logits=shared, create_graph=False)
    d = grad / expand_like(per_sample_norm(grad).clamp_min(1e-12), grad)
    ce_step = F.cross_entropy(model(x.detach() + h * d), target, reduction="none")
    return ((ce_step - ce) / h).pow(2)


@register_penalty("gradnorm")
class InputGradientNorm(PenaltyTerm):
    """||grad_x CE||^2 by double backprop or by a finite difference (see `input_gradient_norm`).

    Examples:
        >>> InputGradientNorm(method="finite_difference").method
        'finite_difference'
    """

    needs_input_grad = True

    @property
    def double_backprop(self) -> bool:  # type: ignore[override]  # follows `method`
        """Double backprop differentiates through the input gradient; the finite difference
        does not."""
        return self.method == "double_backprop"

    @property
    def full_precision(self) -> bool:  # type: ignore[override]  # follows `method`
        """The finite difference must run in float32 under autocast."""
        return self.method == "finite_difference"

    def __init__(
        self,
        weight: float = 1.0,
        method: str = "double_backprop",
        h: float = 0.01,
        name: str | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(weight, name, seed)
        check_gradient_norm_args(method, h)
        self.method, self.h = method, h

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        return input_gradient_norm(
            model, inputs, target, method=self.method, h=self.h, logits=logits
        )
