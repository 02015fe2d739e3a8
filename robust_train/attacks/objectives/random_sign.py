"""The noise baseline: x + epsilon * random signs, the worst of `noise_draws` draws."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from robust_train.attacks.objectives.base import FragilityObjective, register_objective

if TYPE_CHECKING:
    from robust_train.attacks.options import AttackOptions


@register_objective("random_sign")
class RandomSign(FragilityObjective):
    """Noise at the budget (Ghorbani et al. 2019): x + epsilon * s, s uniform random signs,
    clipped to [0, 1]; the worst of `noise_draws` label-keeping draws is kept.

    Each draw is one restart of one step of size epsilon from the clean image (`schedule`,
    `start_point`), so every pixel moves by epsilon unless the image range clips it (with
    `norm="l2"`, the sign vector scaled to L2 length epsilon). Draws are ranked like the top-k
    attack (lower top-k intersection, ties lower Spearman); a draw that changes the predicted
    label is never kept, and an image none of whose draws keeps its label keeps its clean map.
    `n_steps`, `step_size` and `n_restarts` do not apply (the result records 1 step of
    epsilon and `noise_draws` restarts). Needs no gradient of the explainer, so any explainer
    (even a detaching one) can be measured. The random walk of `n_steps` small sign steps is
    `random_walk`.

    Examples:
        >>> from robust_train.attacks.options import AttackOptions
        >>> o = RandomSign.schedule(AttackOptions(epsilon=0.3, noise_draws=4).resolved(8, 8))
        >>> o.n_restarts, o.n_steps, o.step_size
        (4, 1, 0.3)
        >>> x0 = torch.rand(2, 1, 3, 3)
        >>> objective = RandomSign(torch.rand(2, 3, 3), k=2, measure_k=2)
        >>> objective.start_point(x0, 0.3, 3, torch.manual_seed(0)) is x0
        True
        >>> sorted(objective.direction(x0, torch.manual_seed(0)).unique().tolist())
        [-1.0, 1.0]
    """

    needs_gradient = False
    random_starts = False  # every draw starts at the clean image

    @classmethod
    def schedule(cls, options: AttackOptions) -> AttackOptions:
        assert options.epsilon is not None, "resolved options"
        return dataclasses.replace(
            options, n_restarts=options.noise_draws, n_steps=1, step_size=options.epsilon
        )

    def direction(self, x: Tensor, generator: torch.Generator) -> Tensor:
        noise = torch.randn(x.shape, generator=generator, device=generator.device, dtype=x.dtype)
        return noise.to(x.device).sign()
