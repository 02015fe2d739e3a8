"""Argument checks, explainer resolution, model-state handling and the surrogate for the attacks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from robust_train._validation import check_positive
from robust_train.models.softplus import count_relus, softplus

Explainer = Callable[..., Tensor]

def resolve_explainer(explainer: str | Explainer, *, needs_gradient: bool) -> tuple[Explainer, str]:
    """Return `(callable, name)` for an explainer given as a callable or a registered name.

    Names are resolved with `robust_train.explain.get_explainer` (imported here, lazily). An
    attack that differentiates through the map rejects explainers that `is_differentiable` says
    are not (meaningful perturbation optimises a mask).

    Example:
        >>> from robust_train.explain.gradient import saliency
        >>> resolve_explainer(saliency, needs_gradient=True)[1]
        'saliency'
    """
    from robust_train.explain import get_explainer, is_differentiable

    if not isinstance(explainer, str) and not callable(explainer):
        raise TypeError(
            f"`explainer` must be a name or a callable explainer(model, x, target, *, "
            f"create_graph=False), got {type(explainer).__name__}"
        )
    try:
        func = get_explainer(explainer)
    except (KeyError, ValueError) as err:
        raise ValueError(f"Unknown `explainer` {explainer!r}: {err}") from err
    name = explainer if isinstance(explainer, str) else str(getattr(
        func, "__name__", None) or getattr(getattr(func, "func", None), "__name__", repr(func)))
    if needs_gradient and not is_differentiable(func):
        raise ValueError(
            f"`explainer` {name!r} is not differentiable with respect to the input (it optimises "
            "a mask), so a gradient attack cannot target it; use a gradient explainer here, or "
            "objective='random_sign'"
        )
    return func, name


def check_k(k: object, name: str, height: int, width: int) -> int:
    """Raise unless `k` is an int in [1, H*W]; name the map size in the error."""
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
    if region.dim() != 3 or region.shape[0] not in (1, batch) or region.shape[1:] != (height, width):
        raise ValueError(
            f"`target_region` must have shape ({batch} or 1, {height}, {width}), "
            f"got {tuple(region.shape)}"
        )
    empty = ~region.flatten(1).any(1)
    if bool(empty.any()):
        raise ValueError(f"`target_region` has no pixel set for image(s) {empty.nonzero().flatten().tolist()}")
    return region.expand(batch, height, width)


def check_optional_positive(value: object, name: str, *, integer: bool = False) -> None:
    if value is not None:
        check_positive(value, name, integer=integer)


def check_grad_available() -> None:
    """Gradients are impossible under torch.inference_mode (Lightning's validation loop)."""
    if torch.is_inference_mode_enabled():
        raise RuntimeError(
            "`fragility_attack` needs gradients but was called under torch.inference_mode "
            "(Lightning runs validation and test under it); call it from a training hook or use "
            "Trainer(inference_mode=False)"
        )


def restart_seeds(generator: torch.Generator | None, seed: int | None, n_restarts: int) -> list[int]:
    """One seed per restart, drawn up front, so restart r draws the same numbers for any n_steps."""
    if generator is not None and seed is not None:
        raise ValueError("pass either `generator` or `seed`, not both")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"`seed` must be an int, got {seed!r}")
        generator = torch.Generator().manual_seed(seed)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"`generator` must be a torch.Generator, got {type(generator).__name__}")
    device = "cpu" if generator is None else generator.device
    draws = torch.randint(0, 2**62, (n_restarts,), generator=generator, device=device)
    return [int(s) for s in draws]


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Put every submodule in eval mode; restore each one's own flag afterwards."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, mode in modes:
            module.training = mode


def make_surrogate(model: nn.Module, beta: float | None) -> tuple[nn.Module, float | None]:
    """The model that gives the attack direction: a softplus copy, or the model when it has no ReLU.

    ReLU networks have zero second derivative almost everywhere, so the gradient of a gradient map
    vanishes; Ghorbani et al. (2019) take the direction on a copy with softplus_beta activations.
    The copy's parameters do not require grad (only input gradients are taken).
    """
    if beta is None or count_relus(model) == 0:
        return model, None
    surrogate = softplus(model, beta).eval()
    for parameter in surrogate.parameters():
        parameter.requires_grad_(False)
    return surrogate, float(beta)
