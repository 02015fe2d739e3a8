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

from torch import Tensor, nn

from robust_train.certify.deterministic import (
    check_bound_explainer,
    check_epsilon,
    explanation_bounds,
)
from robust_train.core.options import build_options, takes_options
from robust_train.regularizers.base import PenaltyTerm, register_penalty

__all__ = ["IntervalWidthOptions", "IntervalWidthPenalty", "interval_width"]


@dataclass(frozen=True)
class IntervalWidthOptions:
    """The options of the interval-width penalty.

    Attributes:
        epsilon: L_inf radius of the ball the bounds hold over (pixel units).
        explainer: ``saliency`` or ``input_x_gradient``.
        relative: divide the mean width by the mean |midpoint| of the bounds (scale-free).
    """

    epsilon: float = 0.01
    explainer: str = "saliency"
    relative: bool = True

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        check_bound_explainer(self.explainer)
        if not isinstance(self.relative, bool):
            raise TypeError(f"`relative` must be a bool, got {self.relative!r}")


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


def _width(model: nn.Module, inputs: Tensor, target: Tensor, o: IntervalWidthOptions) -> Tensor:
    b = explanation_bounds(model, inputs.detach(), target, epsilon=o.epsilon, explainer=o.explainer)
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

    Examples:
        >>> IntervalWidthPenalty(weight=0.1, epsilon=0.02).options.epsilon
        0.02
    """

    double_backprop = True  # the pooling layers' transposes are autograd backward passes
    options_class = IntervalWidthOptions

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        return _width(model, inputs, target, self.options)
