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

from robust_train.core.options import build_options, takes_options
from robust_train.regularizers._inner import PGDOptions, linf_pgd
from robust_train.regularizers.base import PenaltyTerm, register_penalty

__all__ = ["AdversarialTraining", "adversarial_loss"]


@takes_options(PGDOptions)
def adversarial_loss(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    *,
    generator: torch.Generator | None = None,
    **options: Any,
) -> Tensor:
    """Per-sample cross-entropy at a PGD adversarial example, shape (B,).

    Args:
        model: the classifier being trained.
        inputs: images (B, C, H, W) in [0, 1].
        target: labels (B,).
        generator: RNG of the random start (CPU generator).
        **options: the PGD's `PGDOptions` (epsilon, step_size, n_steps, random_start).

    Examples:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
        >>> x, y = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 2, 0])
        >>> clean = F.cross_entropy(net(x), y, reduction="none")
        >>> # from x (no random start): CE is convex in x here, so each ascent step raises it
        >>> adv = adversarial_loss(net, x, y, n_steps=5, random_start=False)
        >>> bool((adv >= clean - 1e-6).all())
        True
    """
    return _adversarial(
        model,
        inputs,
        target,
        build_options(PGDOptions, options, where="adversarial_loss"),
        generator,
    )


def _adversarial(
    model: nn.Module,
    inputs: Tensor,
    target: Tensor,
    options: PGDOptions,
    generator: torch.Generator | None,
) -> Tensor:
    def objective(adv: Tensor) -> Tensor:
        return F.cross_entropy(model(adv), target, reduction="none")

    adv = linf_pgd(objective, inputs, options, generator)
    return F.cross_entropy(model(adv), target, reduction="none")


@register_penalty("adversarial")
@takes_options(PGDOptions)
class AdversarialTraining(PenaltyTerm):
    """CE at a PGD example, replacing the natural CE (`replaces_task_loss`); Madry et al. 2018.

    Args:
        weight, name, seed: as every `PenaltyTerm`.
        **options: the PGD's `PGDOptions` (epsilon 0.3, 40 steps of 0.01, random start).

    Examples:
        >>> AdversarialTraining(epsilon=0.3, n_steps=40).replaces_task_loss
        True
    """

    replaces_task_loss = True
    double_backprop = False
    options_class = PGDOptions

    def __init__(
        self, weight: float = 1.0, name: str | None = None, seed: int | None = None, **options: Any
    ) -> None:
        super().__init__(weight, name, seed, **options)

    def penalty(
        self, model: nn.Module, inputs: Tensor, target: Tensor, logits: Tensor | None
    ) -> Tensor:
        return _adversarial(model, inputs, target, self.options, self.generator)
