"""Certification-aware training: a penalty on the width of the explanation's bounds.

penalty(x) = mean over input entries of (upper - lower), the interval bounds of the saliency (or
input x gradient) map over the L_inf ball of radius `epsilon` around x (`explanation_bounds`,
method ``interval``), divided, with ``relative=True``, by the mean |midpoint| of those bounds, so
that rescaling the logits does not change it. Wicker, Heo, Costabello & Weller (ICLR 2023,
"Robust Explanation Constraints for Neural Networks") train with this width added to the task
loss; narrower bounds fix more ReLUs over the ball and let `certify_topk` certify more of the
top-k set.

The bounds are computed with eval-mode semantics (BatchNorm's running statistics, no dropout)
and are differentiable in the weights: the term backpropagates through the interval forward and
backward passes (no input gradient with create_graph is taken for Conv2d and Linear layers; the
pooling layers' transposes are, so the term declares double backprop).

The term is registered as ``interval_width`` when `robust_train.certify` is imported (a config
names it by class path, `robust_train.certify.IntervalWidthPenalty`); it composes with any other
penalty, given side by side to `RobustClassifier` or inside ``composed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.certify.deterministic import (
    check_bound_explainer,
    check_epsilon,
    explanation_bounds,
)
from robust_train.core.options import build_options, takes_options
from robust_train.core.validation import check_bool, check_non_negative
from robust_train.regularizers.base import PenaltyTerm, register_penalty

__all__ = ["IntervalWidthOptions", "IntervalWidthPenalty", "interval_width"]


@dataclass(frozen=True)
class IntervalWidthOptions:
    """The options of the interval-width penalty.

    Attributes:
        epsilon: L_inf radius of the ball the bounds hold over (pixel units).
        explainer: ``saliency`` or ``input_x_gradient``.
        relative: divide the mean width by the mean |midpoint| of the bounds (scale-free).
        ramp_steps: the `IntervalWidthPenalty` term raises its radius linearly from 0 to
            `epsilon` over this many calls (one per training step; 0: `epsilon` from the
            first), as Wicker et al. ramp theirs; the function `interval_width` ignores it.
    """

    epsilon: float = 0.01
    explainer: str = "saliency"
    relative: bool = True
    ramp_steps: int = 0

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        check_bound_explainer(self.explainer)
        check_bool(self.relative, "relative")
        check_non_negative(self.ramp_steps, "ramp_steps", integer=True)


@takes_options(IntervalWidthOptions)
def interval_width(model: nn.Module, inputs: Tensor, target: Tensor, **options: Any) -> Tensor:
    """Per-sample width of the explanation's interval bounds, shape (B,).

    Args:
        model: a ReLU network (`robust_train.certify.graph.trace_network` supports it).
        inputs: images (B, C, H, W) in [0, 1].
        target: (B,) class whose logit is explained.
        **options: the fields of `IntervalWidthOptions`.

    Returns:
        Non-negative values with a graph to the model's weights.

    Examples:
        >>> import torch
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
        >>> x = torch.rand(2, 1, 2, 2)
        >>> interval_width(net, x, torch.tensor([0, 1]), epsilon=0.0).tolist()
        [0.0, 0.0]
    """
    o = build_options(IntervalWidthOptions, options, where="interval_width")
    return _width(model, inputs, target, o)


def _width(
    model: nn.Module, inputs: Tensor, target: Tensor, o: IntervalWidthOptions, share: float = 1.0
) -> Tensor:
    eps = o.epsilon * share
    b = explanation_bounds(model, inputs.detach(), target, epsilon=eps, explainer=o.explainer)
    width = (b.upper - b.lower).flatten(1).mean(1)
    if not o.relative:
        return width
    scale = ((b.upper + b.lower) / 2).abs().flatten(1).mean(1)
    return width / (scale + 1e-12)


@register_penalty("interval_width")
@takes_options(IntervalWidthOptions)
class IntervalWidthPenalty(PenaltyTerm):
    """Width of the interval bounds of the explanation over an L_inf ball (`interval_width`).

    Args:
        weight, name, seed: as every `PenaltyTerm`.
        **options: the fields of `IntervalWidthOptions`.

    With ``ramp_steps`` > 0 the radius of call t (counted from 0 by the term, in training mode
    only) is ``epsilon * min(1, (t + 1) / ramp_steps)``; the count is saved with the module's
    state (a resumed fit continues its ramp) and `radius` reads the current value.

    Examples:
        >>> IntervalWidthPenalty(weight=0.1, epsilon=0.02).options.epsilon
        0.02
        >>> IntervalWidthPenalty(epsilon=0.02, ramp_steps=4).radius
        0.005
    """

    double_backprop = True  # the pooling layers' transposes are autograd backward passes
    options_class = IntervalWidthOptions

    def __init__(
        self, weight: float = 1.0, name: str | None = None, seed: int | None = None, **options: Any
    ) -> None:
        super().__init__(weight, name, seed, **options)
        self.ramp_calls: Tensor
        self.register_buffer("ramp_calls", torch.zeros((), dtype=torch.long))

    @property
    def radius(self) -> float:
        """The L_inf radius of the next call (`epsilon` once the ramp is over)."""
        return self.options.epsilon * self._share()

    def _share(self) -> float:
        steps = self.options.ramp_steps
        return min(1.0, (int(self.ramp_calls) + 1) / steps) if steps else 1.0

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        share = self._share()
        if self.training and self.options.ramp_steps:
            self.ramp_calls.add_(1)
        return _width(model, inputs, target, self.options, share)
