"""Input-gradient norm penalty (Ross & Doshi-Velez 2018; Finlay & Oberman 2019).

double_backprop: ||grad_x CE(x)||_2^2, differentiated through the gradient (double backprop).
finite_difference: ((CE(x + h d) - CE(x)) / h)^2 with d = grad_x CE / ||grad_x CE|| detached: the
directional derivative along the gradient equals its norm, so this approximates the same quantity
with one extra forward and a plain backward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor

from robust_train.core.validation import check_choice, check_positive
from robust_train.regularizers._penalty_parts import ce_input_gradient, expand_like, per_sample_norm
from robust_train.regularizers.base import PenaltyTerm, register_penalty
from robust_train.regularizers.options import PenaltyCall, penalty_function

GRADIENT_NORM_METHODS = ("double_backprop", "finite_difference")


def check_gradient_norm_args(method: str, h: float) -> None:
    """The one argument check of `input_gradient_norm` and `InputGradientNorm`."""
    check_choice(method, "method", GRADIENT_NORM_METHODS)
    check_positive(h, "h")


@dataclass(frozen=True)
class GradientNormOptions:
    """The options of the input-gradient norm penalty (the function and the term take them).

    Attributes:
        method: "double_backprop" or "finite_difference".
        h: step of the finite difference (pixel units).
    """

    method: str = "double_backprop"
    h: float = 0.01

    def __post_init__(self) -> None:
        check_gradient_norm_args(self.method, self.h)


@penalty_function(GradientNormOptions, logits=True)
def input_gradient_norm(call: PenaltyCall[GradientNormOptions]) -> Tensor:
    """Squared L2 norm of the input gradient of the per-sample cross-entropy, shape (B,).

    The inputs should require grad (with `logits`, they are the tensor that produced them).

    Examples:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))
        >>> x = torch.rand(3, 1, 2, 2, requires_grad=True)
        >>> v = input_gradient_norm(net, x, torch.tensor([0, 1, 1]))
        >>> v.shape, bool((v >= 0).all())
        (torch.Size([3]), True)
    """
    model, inputs, target, o = call.model, call.inputs, call.target, call.options
    x = inputs if inputs.requires_grad else inputs.detach().requires_grad_(True)
    shared = call.logits if x is inputs else None
    if o.method == "double_backprop":
        _, grad = ce_input_gradient(model, x, target, logits=shared, create_graph=True)
        return grad.flatten(1).pow(2).sum(1)
    ce, grad = ce_input_gradient(model, x, target, logits=shared, create_graph=False)
    d = grad / expand_like(per_sample_norm(grad).clamp_min(1e-12), grad)
    ce_step = F.cross_entropy(model(x.detach() + o.h * d), target, reduction="none")
    return ((ce_step - ce) / o.h).pow(2)


@register_penalty("gradnorm")
class InputGradientNorm(PenaltyTerm):
    """||grad_x CE||^2 by double backprop or by a finite difference (see `input_gradient_norm`).

    Examples:
        >>> InputGradientNorm(method="finite_difference").method
        'finite_difference'
    """

    needs_input_grad = True
    options_class = GradientNormOptions
    function = staticmethod(input_gradient_norm)

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
        super().__init__(weight, name, seed, method=method, h=h)

    @property
    def method(self) -> str:
        """The estimate (`GradientNormOptions.method`)."""
        return str(self.options.method)
