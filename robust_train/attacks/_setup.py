"""Argument checks, the softplus surrogate and the zero-direction diagnosis of the attacks."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from robust_train._runtime import make_generator
from robust_train.models.softplus import count_functional_relus, count_relus, softplus


def check_k(k: object, name: str, height: int, width: int) -> int:
    """Raise unless `k` is an int in [1, H*W]; name the map size in the error.

    Example:
        >>> check_k(3, "k", 2, 2)
        3
    """
    n = height * width
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        raise ValueError(
            f"`{name}` must be an int in [1, H*W] = [1, {n}] for {height}x{width} images, got {k!r}"
        )
    return k


def check_region(region: object, batch: int, height: int, width: int) -> Tensor:
    """Check a target region: bool (B, H, W) or (1, H, W), at least one pixel set per image."""
    if not isinstance(region, Tensor) or region.dtype != torch.bool:
        kind = f"dtype {region.dtype}" if isinstance(region, Tensor) else type(region).__name__
        raise TypeError(f"`target_region` must be a bool tensor (B or 1, H, W), got {kind}")
    if (
        region.dim() != 3
        or region.shape[0] not in (1, batch)
        or region.shape[1:] != (height, width)
    ):
        raise ValueError(
            f"`target_region` must have shape ({batch} or 1, {height}, {width}), "
            f"got {tuple(region.shape)}"
        )
    empty = ~region.flatten(1).any(1)
    if bool(empty.any()):
        raise ValueError(
            f"`target_region` has no pixel set for image(s) {empty.nonzero().flatten().tolist()}"
        )
    return region.expand(batch, height, width)


def restart_seeds(
    generator: torch.Generator | None, seed: int | None, n_restarts: int
) -> list[int]:
    """One seed per restart, drawn up front, so restart r draws the same numbers for any n_steps.

    Example:
        >>> restart_seeds(None, 0, 2) == restart_seeds(None, 0, 2)
        True
    """
    generator = make_generator(generator, seed, "cpu")
    device = "cpu" if generator is None else generator.device
    draws = torch.randint(0, 2**62, (n_restarts,), generator=generator, device=device)
    return [int(s) for s in draws]


@dataclass
class Surrogate:
    """The model that gives the attack direction, and how it was made.

    Attributes:
        model: a softplus copy of the attacked model, or the model itself.
        beta: the softplus beta used, or None when the model itself gives the direction.
        functional_relus: functional ReLU calls found in the model (rewritten in `model` when
            `beta` is set), or None when the model could not be traced by torch.fx.
    """

    model: nn.Module
    beta: float | None
    functional_relus: int | None


def make_surrogate(model: nn.Module, beta: float | None) -> Surrogate:
    """A softplus copy (modules and functional calls) of `model`, or the model when it has no ReLU.

    ReLU networks have zero second derivative almost everywhere, so the gradient of a gradient map
    vanishes; Ghorbani et al. (2019) take the direction on a copy with softplus_beta activations.
    The copy's parameters do not require grad (only input gradients are taken).
    """
    functional = count_functional_relus(model)
    if beta is None or (count_relus(model) == 0 and not functional):
        return Surrogate(model, None, functional)
    surrogate = softplus(model, beta, functional=bool(functional)).eval()
    for parameter in surrogate.parameters():
        parameter.requires_grad_(False)
    return Surrogate(surrogate, float(beta), functional)


def zero_direction_cause(
    model: nn.Module, surrogate: Surrogate, clean_logits: Tensor, clean_map: Tensor
) -> str:
    """Why the ascent direction stayed exactly zero: the most likely cause, in words.

    Checked in order: non-finite parameters or logits (a diverged training run), constant clean
    maps (dead units or saturation: no explanation to move), functional ReLUs that could not be
    replaced, and last a piecewise-linear model attacked without a softplus surrogate.

    Example:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
        >>> s = Surrogate(net, None, 0)
        >>> zero_direction_cause(net, s, torch.zeros(1, 2), torch.zeros(1, 2, 2))[:37]
        'the clean explanation maps are consta'
    """
    bad = [n for n, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
    if bad:
        return (
            f"the model has non-finite parameters ({', '.join(bad[:3])}): training diverged "
            "(e.g. a learning rate far too large); evaluate a checkpoint from before"
        )
    if not bool(torch.isfinite(clean_logits).all()):
        return "the model's logits are non-finite: training diverged or the inputs overflow it"
    flat = clean_map.flatten(1)
    if bool((flat.amax(1) == flat.amin(1)).any()):
        return (
            "the clean explanation maps are constant (all units dead or saturated, e.g. after a "
            "diverged training run): there is no explanation to move"
        )
    if surrogate.beta is None and surrogate.functional_relus is None:
        return (
            "the model calls ReLU functionally (F.relu in forward) and torch.fx could not trace "
            "it to swap in softplus; use nn.ReLU modules or a smooth model"
        )
    if surrogate.beta is None:
        return (
            "the model is piecewise linear (zero second derivative) and no softplus surrogate "
            "was used (surrogate_beta=None or no ReLU found); set surrogate_beta or use a "
            "smooth model"
        )
    return "the gradient of the objective vanished (saturated softplus surrogate or explainer)"
