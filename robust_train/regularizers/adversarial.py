"""PGD adversarial training (Madry, Makelov, Schmidt, Tsipras, Vladu, ICLR 2018, arXiv 1706.06083).

loss = CE(x', y), x' = argmax_{x' in B_inf(x, eps)} CE(x', y) by PGD with a random start (MNIST:
eps 0.3, 40 steps of 0.01). The baseline every attributional-robustness paper reports; robust
predictions do not by themselves give robust attributions.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from robust_train.regularizers._inner import check_pgd_args, linf_pgd
from robust_train.regularizers.base import PenaltyTerm, register_penalty


def adversarial_loss(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    epsilon: float = 0.3,
    step_size: float = 0.01,
    n_steps: int = 40,
    random_start: bool = True,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Per-sample cross-entropy at a PGD adversarial example, shape (B,).

    Args:
        model: the classifier being trained.
        inputs: images (B, C, H, W) in [0, 1].
        target: labels (B,).
        epsilon: L_inf radius.
        step_size: PGD sign-step size.
        n_steps: PGD steps (0: CE at the random start, or at x).
        random_start: start at a uniform point of the ball.
        generator: RNG of the random start (CPU generator).

    Example:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
        >>> x, y = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 2, 0])
        >>> clean = F.cross_entropy(net(x), y, reduction="none")
        >>> # from x (no random start): CE is convex in x here, so each ascent step raises it
        >>> adv = adversarial_loss(net, x, y, n_steps=5, random_start=False)
        >>> bool((adv >= clean - 1e-6).all())
        True
    """
    check_pgd_args(epsilon, step_size, n_steps)

    def objective(adv: Tensor) -> Tensor:
        return F.cross_entropy(model(adv), target, reduction="none")

    adv = linf_pgd(
        objective,
        inputs,
        epsilon=epsilon,
        step_size=step_size,
        n_steps=n_steps,
        random_start=random_start,
        generator=generator,
    )
    return F.cross_entropy(model(adv), target, reduction="none")


@register_penalty("adversarial")
class AdversarialTraining(PenaltyTerm):
    """CE at a PGD example, replacing the natural CE (`replaces_task_loss`); Madry et al. 2018.

    Example:
        >>> AdversarialTraining(epsilon=0.3, n_steps=40).replaces_task_loss
        True
    """

    replaces_task_loss = True
    double_backprop = False

    def __init__(
        self,
        weight: float = 1.0,
        epsilon: float = 0.3,
        step_size: float = 0.01,
        n_steps: int = 40,
        random_start: bool = True,
        name: str | None = None,
        seed: int | None = None,
    ) -> None:
        super().__init__(weight, name, seed)
        check_pgd_args(epsilon, step_size, n_steps)
        self.kwargs: dict[str, Any] = dict(
            epsilon=epsilon, step_size=step_size, n_steps=n_steps, random_start=random_start
        )

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        return adversarial_loss(model, inputs, target, generator=self.generator, **self.kwargs)
