"""PGD adversarial training (Madry, Makelov, Schmidt, Tsipras, Vladu, ICLR 2018, arXiv 1706.06083).

loss = CE(x', y), x' = argmax_{x' in B_inf(x, eps)} CE(x', y) by PGD with a random start (MNIST:
eps 0.3, 40 steps of 0.01). The baseline every attributional-robustness paper reports; robust
predictions do not by themselves give robust attributions.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from robust_train.core.options import takes_options
from robust_train.regularizers._inner import PGDOptions, linf_pgd
from robust_train.regularizers.base import PenaltyTerm, register_penalty
from robust_train.regularizers.options import PenaltyCall, penalty_function

__all__ = ["AdversarialTraining", "adversarial_loss"]


@penalty_function(PGDOptions)
def adversarial_loss(call: PenaltyCall[PGDOptions]) -> Tensor:
    """Per-sample cross-entropy at a PGD adversarial example, shape (B,).

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
        >>> x, y = torch.rand(4, 1, 4, 4), torch.tensor([0, 1, 2, 0])
        >>> clean = F.cross_entropy(net(x), y, reduction="none")
        >>> # from x (no random start): CE is convex in x here, so each ascent step raises it
        >>> adv = adversarial_loss(net, x, y, n_steps=5, random_start=False)
        >>> bool((adv >= clean - 1e-6).all())
        True
    """
    model, target = call.model, call.target

    def objective(adv: Tensor) -> Tensor:
        return F.cross_entropy(model(adv), target, reduction="none")

    adv = linf_pgd(objective, call.inputs, call.options, call.generator)
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
    function = staticmethod(adversarial_loss)
