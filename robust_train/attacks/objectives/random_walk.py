"""A random walk: `n_steps` random sign steps of `step_size`, ranked like the top-k attack."""

from __future__ import annotations

import torch
from torch import Tensor

from robust_train.attacks.objectives.base import FragilityObjective, register_objective


@register_objective("random_walk")
class RandomWalk(FragilityObjective):
    """d = sign(N(0, I)) at every step: the attack's loop with random directions.

    Each restart walks `n_steps` sign steps of `step_size` (restart 0 from the image, later
    ones from random points of the ball), projected onto the ball, and the worst label-keeping
    iterate over all steps and restarts is kept. Independent signs mostly cancel, so the kept
    iterates lie well inside the budget (after n steps of size a a pixel has moved by about
    a * sqrt(n)): this is weaker than noise of the budget itself, which is `random_sign`. It
    shows how far small random moves, of the attack's step and count, move the map.

    Examples:
        >>> clean = torch.rand(2, 3, 3)
        >>> d = RandomWalk(clean, k=2, measure_k=2).direction(torch.zeros(2, 1, 3, 3),
        ...                                                   torch.manual_seed(0))
        >>> sorted(d.unique().tolist())
        [-1.0, 1.0]
    """

    needs_gradient = False

    def direction(self, x: Tensor, generator: torch.Generator) -> Tensor:
        noise = torch.randn(x.shape, generator=generator, device=generator.device, dtype=x.dtype)
        return noise.to(x.device).sign()
