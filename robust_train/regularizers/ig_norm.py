"""IG-NORM and IG-SUM-NORM (Chen, Wu, Rastogi, Liang, Jha, "Robust Attribution Regularization",
NeurIPS 2019, arXiv 1905.09957).

With IG(x, x') = (x' - x) * mean_{a} grad_x CE(x + a (x' - x), y) the integrated gradients of the
loss along the straight path from x to x' (see `loss_path_ig`):

- IG-NORM: CE(x) + lambda * max_{x' in B_inf(x, eps)} ||IG(x, x')||_1;
- IG-SUM-NORM: max_{x' in B_inf(x, eps)} CE(x') + beta * ||IG(x, x')||_1, which replaces the
  natural cross-entropy (it contains adversarial training).

The inner max is an L_inf PGD (RAR's MNIST code: eps 0.3, 40 steps of 0.01, 10 path points inside
the attack, 50 in the update). x' is detached; the parameter gradient flows through the IG at x'
(double backprop through every path point).

Epsilon warm-up (the terms' `epsilon_warmup_steps`): the inner attack's budget and step rise
linearly to their values over the first training steps. A short fit from random weights at the
full budget from its first step can kill every ReLU of a layer, after which the output no longer
depends on the input and no gradient reaches the layers before the dead ones; warming epsilon
up avoids it (the design notes describe the failure).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from robust_train.core.options import takes_options
from robust_train.core.validation import check_non_negative, check_positive
from robust_train.regularizers._inner import PGDOptions, linf_pgd, loss_path_ig
from robust_train.regularizers.base import PenaltyTerm, register_penalty
from robust_train.regularizers.options import PenaltyCall, penalty_function

__all__ = [
    "IGNorm",
    "IGOptions",
    "IGSumNorm",
    "IGSumOptions",
    "check_warmup_steps",
    "ig_norm",
    "ig_sum_norm",
    "warmed_up",
]


@dataclass(frozen=True)
class IGOptions(PGDOptions):
    """IG-NORM's options: the inner PGD's (`PGDOptions`) and the IG path points.

    Attributes:
        n_attack_points: path points of the IG inside the attack.
        n_points: path points of the IG in the returned value (the update).
    """

    n_attack_points: int = 10
    n_points: int = 50

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self.n_attack_points, "n_attack_points", integer=True)
        check_positive(self.n_points, "n_points", integer=True)


@dataclass(frozen=True)
class IGSumOptions(IGOptions):
    """IG-SUM-NORM's options: IG-NORM's and `beta`, the weight of the IG norm in the objective."""

    beta: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_non_negative(self.beta, "beta")


def check_warmup_steps(value: object) -> None:
    """The one check of `epsilon_warmup_steps` (an int >= 0)."""
    check_non_negative(value, "epsilon_warmup_steps", integer=True)


def warmed_up(options: IGOptions, step: int, warmup_steps: int) -> IGOptions:
    """The options of training step `step` (0-based) under a linear epsilon warm-up: epsilon and
    step_size times min(1, (step + 1) / warmup_steps); unchanged when `warmup_steps` is 0.

    Examples:
        >>> o = warmed_up(IGOptions(epsilon=0.3, step_size=0.3), step=4, warmup_steps=10)
        >>> round(o.epsilon, 3), round(o.step_size, 3)
        (0.15, 0.15)
        >>> warmed_up(o, step=0, warmup_steps=0) is o
        True
    """
    check_warmup_steps(warmup_steps)
    check_non_negative(step, "step", integer=True)
    if warmup_steps == 0 or step + 1 >= warmup_steps:
        return options
    f = (step + 1) / warmup_steps
    return dataclasses.replace(
        options, epsilon=options.epsilon * f, step_size=options.step_size * f
    )


def _ig_l1(ig: Tensor) -> Tensor:
    return ig.abs().flatten(1).sum(1)


def _ig_objective(call: PenaltyCall[IGOptions], beta: float | None) -> Tensor:
    """max_{x'} ||IG(x, x')||_1 (beta None) or max_{x'} CE(x') + beta ||IG(x, x')||_1."""
    model, target, o, x0 = call.model, call.target, call.options, call.inputs.detach()

    def value(adv: Tensor, n_points: int) -> Tensor:
        ig, ce = loss_path_ig(model, x0, adv, target, n_points=n_points, create_graph=True)
        return _ig_l1(ig) if beta is None else ce + beta * _ig_l1(ig)

    adv = linf_pgd(lambda a: value(a, o.n_attack_points), x0, o, call.generator)
    return value(adv, o.n_points)


@penalty_function(IGOptions)
def ig_norm(call: PenaltyCall[IGOptions]) -> Tensor:
    """Per-sample max_{x'} ||IG(x, x')||_1 of the cross-entropy (IG-NORM's penalty), shape (B,).

    Examples:
        >>> import torch
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.Softplus(), nn.Linear(8, 3))
        >>> x, y = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 2, 0])
        >>> v = ig_norm(net, x, y, n_steps=2, n_attack_points=2, n_points=4)
        >>> v.shape, bool((v >= 0).all())
        (torch.Size([4]), True)
    """
    return _ig_objective(call, None)


@penalty_function(IGSumOptions)
def ig_sum_norm(call: PenaltyCall[IGSumOptions]) -> Tensor:
    """Per-sample max_{x'} CE(x') + beta * ||IG(x, x')||_1 (IG-SUM-NORM's objective), shape (B,).

    Examples:
        >>> import torch
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
        >>> x, y = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 2, 0])
        >>> ig_sum_norm(net, x, y, n_steps=1, n_attack_points=2, n_points=2).shape
        torch.Size([4])
    """
    return _ig_objective(call, call.options.beta)


@register_penalty("ig_norm")
@takes_options(IGOptions)
class IGNorm(PenaltyTerm):
    """IG-NORM (Chen et al. 2019): weight * max_{x'} ||IG(x, x')||_1 added to the natural CE.

    Defaults are RAR's MNIST settings (weight = lambda = 1). See `ig_norm`.

    Args:
        weight: lambda.
        name: logged as train/penalty/<name>.
        seed: seed of the inner attack's random start.
        epsilon_warmup_steps: the inner attack's epsilon and step size rise linearly over the
            first this many penalty computations (training steps; with `every_n_steps` k, every
            k-th step): at the t-th (from 0) they are
            min(1, (t + 1) / epsilon_warmup_steps) times their values (`warmed_up`); 0 (RAR):
            the full budget from the first step. The call count is not saved in checkpoints
            (a resumed fit warms up again).
        **options: `IGOptions` (IG-SUM-NORM: `IGSumOptions`).

    Examples:
        >>> IGNorm(n_steps=10)
        IGNorm(name='ig_norm', weight=1.0)
        >>> IGNorm(epsilon_warmup_steps=100)
        IGNorm(name='ig_norm', weight=1.0, epsilon_warmup_steps=100)
    """

    double_backprop = True
    options_class = IGOptions
    function = staticmethod(ig_norm)

    def __init__(
        self,
        weight: float = 1.0,
        name: str | None = None,
        seed: int | None = None,
        epsilon_warmup_steps: int = 0,
        **options: Any,
    ) -> None:
        check_warmup_steps(epsilon_warmup_steps)
        super().__init__(weight, name, seed, **options)
        self.epsilon_warmup_steps = int(epsilon_warmup_steps)

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        # The warm-up's clock: the penalties computed so far.
        options = warmed_up(self.options, self.computed, self.epsilon_warmup_steps)
        return self.compute(model, inputs, target, logits, options)

    def extra_repr(self) -> str:
        text = super().extra_repr()
        if self.epsilon_warmup_steps:
            text += f", epsilon_warmup_steps={self.epsilon_warmup_steps}"
        return text


@register_penalty("ig_sum_norm")
@takes_options(IGSumOptions)
class IGSumNorm(IGNorm):
    """IG-SUM-NORM (Chen et al. 2019): max_{x'} CE(x') + beta ||IG(x, x')||_1 replaces the CE.

    `replaces_task_loss` is True: RobustClassifier optimises weight * this value instead of the
    natural cross-entropy. Defaults are RAR's MNIST settings (beta 0.1). See `ig_sum_norm`.

    Examples:
        >>> IGSumNorm(beta=0.1).replaces_task_loss
        True
    """

    replaces_task_loss = True
    options_class = IGSumOptions
    function = staticmethod(ig_sum_norm)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, beta={self.options.beta}"
