"""Pieces of the adversarial-training penalties: the inner L_inf PGD and the loss IG on a path.

Both follow the released MNIST code of RAR (Chen et al. 2019, arXiv 1905.09957) and Madry et al.
(2018): sign steps projected onto B_inf(x, eps) intersected with [0, 1], optionally from a uniform
random point of the ball; the result is detached (the outer loss does not differentiate through
the attack).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from robust_train.attacks.options import check_linf_budget
from robust_train.core.balls import random_offset, step_direction
from robust_train.core.options import check_options, option
from robust_train.core.validation import check_bool, check_non_negative, check_positive


@dataclass(frozen=True)
class PGDOptions:
    """The inner L_inf PGD of every penalty that has one, defined once (RAR's and Madry et
    al.'s MNIST settings: eps 0.3, 40 steps of 0.01, from a uniform random point of the ball).

    Attributes:
        epsilon: L_inf radius of the ball of x' (pixel units, < 1).
        step_size: PGD sign-step size.
        n_steps: PGD steps (0: x' is the random start, or x itself).
        random_start: start at a uniform point of the ball.
    """

    epsilon: float = option(0.3, check=check_linf_budget)
    step_size: float = option(0.01, check=check_positive)
    n_steps: int = option(40, check=partial(check_non_negative, integer=True))
    random_start: bool = option(True, check=check_bool)

    def __post_init__(self) -> None:
        check_options(self)


def linf_pgd(
    objective: Callable[[Tensor], Tensor],
    inputs: Tensor,
    options: PGDOptions,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Maximise a per-sample `objective(x')` (B,) over B_inf(inputs, eps) and [0, 1].

    x'_0 = clip(x + U(-eps, eps)) (or x), x'_{t+1} = clip_ball(x'_t + step_size * sign(grad)).
    Gradients are taken with respect to x' only; the returned x' is detached.

    Examples:
        >>> x = torch.full((2, 1, 2, 2), 0.5)
        >>> o = PGDOptions(epsilon=0.1, step_size=0.05, n_steps=3, random_start=False)
        >>> adv = linf_pgd(lambda z: z.flatten(1).sum(1), x, o)
        >>> bool(torch.allclose(adv, torch.full_like(x, 0.6)))
        True
    """
    epsilon, step_size = options.epsilon, options.step_size
    x0 = inputs.detach()
    # The box of B_inf(x, eps) and [0, 1], kept as bounds: a point inside stays bit for bit.
    lower, upper = (x0 - epsilon).clamp(min=0.0), (x0 + epsilon).clamp(max=1.0)
    adv = x0.clone()
    if options.random_start:
        delta = random_offset(
            x0.shape, epsilon, "linf", generator, device="cpu", dtype=torch.float32, like=x0
        )
        adv = torch.min(torch.max(x0 + delta, lower), upper)
    for _ in range(options.n_steps):
        adv = adv.detach().requires_grad_(True)
        with torch.enable_grad():
            (grad,) = torch.autograd.grad(objective(adv).sum(), adv)
        moved = adv.detach() + step_size * step_direction(grad, "linf")
        adv = torch.min(torch.max(moved, lower), upper)
    return adv.detach()


def loss_path_ig(
    model: nn.Module,
    inputs: Tensor,
    endpoints: Tensor,
    target: Tensor,
    *,
    n_points: int,
    create_graph: bool,
) -> tuple[Tensor, Tensor]:
    """IG of the cross-entropy from x to x', and the per-sample CE at x' (both with graph).

    IG(x, x') = (x' - x) * mean_{j=1..m} grad_z CE(z_j, y),  z_j = x + (j / m) (x' - x)
    (RAR's right Riemann sum: the last point is x' itself, whose CE is returned too). `inputs`
    is detached; `endpoints` may require grad (inside an attack) or be detached (in the update).
    All m * B path points go through the model in one batch.

    Returns:
        (IG (B, C, H, W), CE(x') (B,)).

    Examples:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
        >>> x, y = torch.rand(2, 1, 2, 2), torch.tensor([0, 2])
        >>> ig, ce = loss_path_ig(net, x, x, y, n_points=4, create_graph=False)
        >>> float(ig.abs().max()), ce.shape
        (0.0, torch.Size([2]))
    """
    check_positive(n_points, "n_points", integer=True)
    x0 = inputs.detach()
    b = x0.shape[0]
    alphas = torch.arange(1, n_points + 1, dtype=x0.dtype, device=x0.device) / n_points
    alphas = alphas.view(-1, *([1] * x0.dim()))
    with torch.enable_grad():
        path = (x0.unsqueeze(0) + alphas * (endpoints - x0).unsqueeze(0)).flatten(0, 1)
        if not path.requires_grad:
            path.requires_grad_(True)
        ce = F.cross_entropy(model(path), target.repeat(n_points), reduction="none")
        (grad,) = torch.autograd.grad(ce.sum(), path, create_graph=create_graph)
    mean_grad = grad.view(n_points, b, *x0.shape[1:]).mean(0)
    return (endpoints - x0) * mean_grad, ce.view(n_points, b)[-1]
