"""Curvature penalties: the explanation of a smooth model moves little under small perturbations.

gradient_difference (CURE, Moosavi-Dezfooli et al. 2019; Dombrowski et al. 2022):
    ||grad_x CE(x + h z) - grad_x CE(x)||^2 / h^2,  z = sign(g) / ||sign(g)||, g = grad_x CE(x),
    a finite-difference estimate of ||H z||^2 (double backprop through both gradients).
zero_order (this project): the second difference of the logits along random directions,
    ||z(x + h u) + z(x - h u) - 2 z(x)||^2 / h^4,  u random with ||u||_2 = 1,
    an estimate of ||u^T H_f u||^2 summed over logits from one batched forward of [x + hu, x - hu]
    (the clean forward is shared with the task loss) and a plain backward: no double backprop.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from robust_train.core.validation import check_choice, check_positive
from robust_train.regularizers._penalty_parts import (
    ce_input_gradient,
    expand_like,
    forward_logits,
    per_sample_norm,
)
from robust_train.regularizers.base import PenaltyTerm, register_penalty
from robust_train.regularizers.options import PenaltyCall, penalty_function

CURVATURE_METHODS = ("gradient_difference", "zero_order")


def check_curvature_args(method: str, h: float, n_directions: int) -> None:
    """The one argument check of `curvature` and `Curvature`."""
    check_choice(method, "method", CURVATURE_METHODS)
    check_positive(h, "h")
    check_positive(n_directions, "n_directions", integer=True)


@dataclass(frozen=True)
class CurvatureOptions:
    """The options of the curvature penalty (the function and the term take them).

    Attributes:
        method: "zero_order" or "gradient_difference".
        h: finite-difference step in pixel units (L2 length of the step).
        n_directions: random directions per input for "zero_order", batched into one forward.
    """

    method: str = "zero_order"
    h: float = 0.05
    n_directions: int = 1

    def __post_init__(self) -> None:
        check_curvature_args(self.method, self.h, self.n_directions)


@penalty_function(CurvatureOptions, logits=True)
def curvature(call: PenaltyCall[CurvatureOptions]) -> Tensor:
    """Per-sample curvature estimate, shape (B,).

    For "gradient_difference" with shared `logits` the inputs must be the tensor (requiring
    grad) that produced the logits; the target is used by "gradient_difference" only (the
    zero-order form uses all logits), and the generator draws the zero-order directions.

    Examples:
        >>> import torch
        >>> lin = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))
        >>> float(curvature(lin, torch.rand(2, 1, 2, 2), torch.tensor([0, 1])).abs().max()) < 1e-3
        True
    """
    o, model, inputs, logits = call.options, call.model, call.inputs, call.logits
    if o.method == "zero_order":
        return _zero_order(model, inputs, o.h, o.n_directions, logits, call.generator)
    return _gradient_difference(model, inputs, call.target, o.h, logits)


def _zero_order(
    model: nn.Module,
    inputs: Tensor,
    h: float,
    n_directions: int,
    logits: Tensor | None,
    generator: torch.Generator | None,
) -> Tensor:
    b = inputs.shape[0]
    x0 = inputs.detach()
    clean = forward_logits(model, x0, logits)
    u = torch.randn((n_directions * b, *x0.shape[1:]), generator=generator).to(x0)
    u = u / expand_like(per_sample_norm(u).clamp_min(1e-12), u) * h
    x_rep = x0.repeat(n_directions, 1, 1, 1)
    both = model(torch.cat([x_rep + u, x_rep - u]))
    plus, minus = both[: n_directions * b], both[n_directions * b :]
    second = (plus + minus - 2 * clean.repeat(n_directions, 1)) / h**2
    return second.pow(2).sum(1).view(n_directions, b).mean(0)


def _gradient_difference(
    model: nn.Module, inputs: Tensor, target: Tensor, h: float, logits: Tensor | None
) -> Tensor:
    x = inputs if inputs.requires_grad else inputs.detach().requires_grad_(True)
    shared = logits if x is inputs else None
    _, g = ce_input_gradient(model, x, target, logits=shared, create_graph=True)
    z = g.detach().sign()
    z = z / expand_like(per_sample_norm(z).clamp_min(1e-12), z)
    x_step = (x.detach() + h * z).requires_grad_(True)
    _, g_step = ce_input_gradient(model, x_step, target, create_graph=True)
    return (g_step - g).flatten(1).pow(2).sum(1) / h**2


@register_penalty("curvature")
class Curvature(PenaltyTerm):
    """Zero-order (logit second difference) or CURE-style gradient-difference curvature.

    `needs_input_grad` is True for "gradient_difference" only (it reuses the clean forward's
    input gradient); the zero-order form reads the clean logits alone, so the shared forward runs
    on inputs that do not require grad.

    Examples:
        >>> Curvature(weight=0.01)
        Curvature(name='curvature', weight=0.01)
        >>> Curvature().needs_input_grad, Curvature(method="gradient_difference").needs_input_grad
        (False, True)
    """

    options_class = CurvatureOptions
    function = staticmethod(curvature)
    full_precision = True  # both forms are finite differences: float32 under autocast

    def __init__(
        self,
        weight: float = 1.0,
        method: str = "zero_order",
        h: float = 0.05,
        n_directions: int = 1,
        name: str | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(weight, name, seed, method=method, h=h, n_directions=n_directions)

    @property
    def method(self) -> str:
        """The estimate (`CurvatureOptions.method`); setting it checks the new value."""
        return str(self.options.method)

    @method.setter
    def method(self, value: str) -> None:
        self.options = dataclasses.replace(self.options, method=value)

    @property
    def needs_input_grad(self) -> bool:  # type: ignore[override]  # follows `method`
        return self.method == "gradient_difference"

    @property
    def double_backprop(self) -> bool:  # type: ignore[override]  # follows `method`
        """The gradient difference differentiates through input gradients."""
        return self.method == "gradient_difference"
