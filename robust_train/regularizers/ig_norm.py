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
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from robust_train._validation import check_non_negative, check_positive
from robust_train.regularizers._inner import check_pgd_args, linf_pgd, loss_path_ig
from robust_train.regularizers.base import PenaltyTerm, register_penalty


def check_ig_args(
    epsilon: float,
    step_size: float,
    n_steps: int,
    n_attack_points: int,
    n_points: int,
    beta: float = 0.0,
) -> None:
    """The one argument check of the IG-NORM functions and terms."""
    check_pgd_args(epsilon, step_size, n_steps)
    check_positive(n_attack_points, "n_attack_points", integer=True)
    check_positive(n_points, "n_points", integer=True)
    check_non_negative(beta, "beta")


def _ig_l1(ig: Tensor) -> Tensor:
    return ig.abs().flatten(1).sum(1)


def ig_norm(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    epsilon: float = 0.3,
    step_size: float = 0.01,
    n_steps: int = 40,
    n_attack_points: int = 10,
    n_points: int = 50,
    random_start: bool = True,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Per-sample max_{x'} ||IG(x, x')||_1 of the cross-entropy (IG-NORM's penalty), shape (B,).

    Args:
        model: the classifier being trained.
        inputs: images (B, C, H, W) in [0, 1].
        target: labels (B,).
        epsilon: L_inf radius of the ball of x'.
        step_size: PGD sign-step size.
        n_steps: PGD steps (0: x' is the random start, or x itself).
        n_attack_points: path points of the IG inside the attack.
        n_points: path points of the IG in the returned value (the update).
        random_start: start the PGD at a uniform point of the ball.
        generator: RNG of the random start (CPU generator).

    Example:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.Softplus(), nn.Linear(8, 3))
        >>> x, y = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 2, 0])
        >>> v = ig_norm(net, x, y, n_steps=2, n_attack_points=2, n_points=4)
        >>> v.shape, bool((v >= 0).all())
        (torch.Size([4]), True)
    """
    check_ig_args(epsilon, step_size, n_steps, n_attack_points, n_points)
    x0 = inputs.detach()

    def objective(adv: Tensor) -> Tensor:
        ig, _ = loss_path_ig(model, x0, adv, target, n_points=n_attack_points, create_graph=True)
        return _ig_l1(ig)

    adv = linf_pgd(
        objective,
        x0,
        epsilon=epsilon,
        step_size=step_size,
        n_steps=n_steps,
        random_start=random_start,
        generator=generator,
    )
    ig, _ = loss_path_ig(model, x0, adv, target, n_points=n_points, create_graph=True)
    return _ig_l1(ig)


def ig_sum_norm(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    beta: float = 0.1,
    epsilon: float = 0.3,
    step_size: float = 0.01,
    n_steps: int = 40,
    n_attack_points: int = 10,
    n_points: int = 50,
    random_start: bool = True,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Per-sample max_{x'} CE(x') + beta * ||IG(x, x')||_1 (IG-SUM-NORM's objective), shape (B,).

    Arguments as in `ig_norm`, plus `beta`, the weight of the IG norm inside the objective.

    Example:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
        >>> x, y = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 2, 0])
        >>> ig_sum_norm(net, x, y, n_steps=1, n_attack_points=2, n_points=2).shape
        torch.Size([4])
    """
    check_ig_args(epsilon, step_size, n_steps, n_attack_points, n_points, beta)
    x0 = inputs.detach()

    def objective(adv: Tensor) -> Tensor:
        ig, ce = loss_path_ig(model, x0, adv, target, n_points=n_attack_points, create_graph=True)
        return ce + beta * _ig_l1(ig)

    adv = linf_pgd(
        objective,
        x0,
        epsilon=epsilon,
        step_size=step_size,
        n_steps=n_steps,
        random_start=random_start,
        generator=generator,
    )
    ig, ce = loss_path_ig(model, x0, adv, target, n_points=n_points, create_graph=True)
    return ce + beta * _ig_l1(ig)


@register_penalty("ig_norm")
class IGNorm(PenaltyTerm):
    """IG-NORM (Chen et al. 2019): weight * max_{x'} ||IG(x, x')||_1 added to the natural CE.

    Defaults are RAR's MNIST settings (weight = lambda = 1). See `ig_norm`.

    Example:
        >>> IGNorm(n_steps=10)
        IGNorm(name='ig_norm', weight=1.0)
    """

    double_backprop = True

    def __init__(
        self,
        weight: float = 1.0,
        epsilon: float = 0.3,
        step_size: float = 0.01,
        n_steps: int = 40,
        n_attack_points: int = 10,
        n_points: int = 50,
        random_start: bool = True,
        name: str | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(weight, name, seed)
        check_ig_args(epsilon, step_size, n_steps, n_attack_points, n_points)
        self.kwargs: dict[str, Any] = dict(
            epsilon=epsilon,
            step_size=step_size,
            n_steps=n_steps,
            n_attack_points=n_attack_points,
            n_points=n_points,
            random_start=random_start,
        )

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        return ig_norm(model, inputs, target, generator=self.generator, **self.kwargs)


@register_penalty("ig_sum_norm")
class IGSumNorm(PenaltyTerm):
    """IG-SUM-NORM (Chen et al. 2019): max_{x'} CE(x') + beta ||IG(x, x')||_1 replaces the CE.

    `replaces_task_loss` is True: RobustClassifier optimises weight * this value instead of the
    natural cross-entropy. Defaults are RAR's MNIST settings (beta 0.1). See `ig_sum_norm`.

    Example:
        >>> IGSumNorm(beta=0.1).replaces_task_loss
        True
    """

    double_backprop = True
    replaces_task_loss = True

    def __init__(
        self,
        weight: float = 1.0,
        beta: float = 0.1,
        epsilon: float = 0.3,
        step_size: float = 0.01,
        n_steps: int = 40,
        n_attack_points: int = 10,
        n_points: int = 50,
        random_start: bool = True,
        name: str | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(weight, name, seed)
        check_ig_args(epsilon, step_size, n_steps, n_attack_points, n_points, beta)
        self.kwargs: dict[str, Any] = dict(
            beta=beta,
            epsilon=epsilon,
            step_size=step_size,
            n_steps=n_steps,
            n_attack_points=n_attack_points,
            n_points=n_points,
            random_start=random_start,
        )

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        return ig_sum_norm(model, inputs, target, generator=self.generator, **self.kwargs)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, beta={self.kwargs['beta']}"
