"""The noise baseline: random sign steps, ranked like the top-k attack."""

from __future__ import annotations

import torch
from torch import Tensor

from robust_train.attacks.objectives.base import FragilityObjective, register_objective


@register_objective("random_sign")
class RandomSign(FragilityObjective):
    """d = sign(N(0, I)): how far noise of the same budget moves the map (Ghorbani et al. 2019).

    Needs no gradient of the explainer, so any explainer (even a detaching one) can be measured.

    Example:
        >>> clean = torch.rand(2, 3, 3)
        >>> d = RandomSign(clean, k=2, measure_k=2).direction(torch.zeros(2, 1, 3, 3),
        ...                                                   torch.manual_seed(0))
        >>> sorted(d.unique().tolist())
        [-1.0, 1.0]
    """

    needs_gradient = False

    def direction(self, x: Tensor, generator: torch.Generator) -> Tensor:
        noise = torch.randn(x.shape, generator=generator, device=generator.device, dtype=x.dtype)
        return noise.to(x.device).sign()
