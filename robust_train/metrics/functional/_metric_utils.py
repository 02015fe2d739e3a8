"""Small helpers shared by the Lipschitz and fidelity metrics: explainers, generators, chunks."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import Tensor

from robust_train._validation import check_positive

Explainer = Callable[..., Tensor]

__all__ = ["Explainer", "resolve_explainer", "make_generator", "row_chunks", "check_batch_size"]


def resolve_explainer(explainer: object, name: str = "explainer") -> Explainer:
    """Return `explainer` if callable; resolve a name with `robust_train.explain.get_explainer`.

    Example:
        >>> from robust_train.explain import saliency
        >>> resolve_explainer(saliency) is saliency
        True
    """
    if isinstance(explainer, str):
        try:
            from robust_train.explain import get_explainer
        except ImportError as err:  # the registry lives in the explain package
            raise ValueError(
                f"`{name}` {explainer!r} is a name, but robust_train.explain.get_explainer is not "
                "available to resolve it; pass the explainer function instead"
            ) from err
        return get_explainer(explainer)
    if not callable(explainer):
        raise TypeError(
            f"`{name}` must be a callable explainer(model, inputs, target, *, create_graph=False) "
            f"or an explainer name, got {explainer!r}"
        )
    return explainer


def make_generator(
    generator: torch.Generator | None, seed: int | None, device: torch.device
) -> torch.Generator | None:
    """The generator to use: `generator`, else one seeded with `seed`, else None (global RNG).

    Example:
        >>> make_generator(None, 3, torch.device("cpu")).initial_seed()
        3
    """
    if generator is not None and seed is not None:
        raise ValueError("pass either `generator` or `seed`, not both")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"`seed` must be an int, got {seed!r}")
        return torch.Generator(device=device).manual_seed(seed)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"`generator` must be a torch.Generator, got {type(generator).__name__}")
    return generator


def generator_device(generator: torch.Generator | None, fallback: torch.device) -> torch.device:
    """Device on which random numbers must be drawn for `generator` (the data's device if None)."""
    return fallback if generator is None else torch.device(generator.device)


def check_batch_size(value: object, name: str = "internal_batch_size") -> None:
    """Raise unless `value` is None (everything in one chunk) or a positive int.

    Example:
        >>> check_batch_size(None); check_batch_size(8)
    """
    if value is not None:
        check_positive(value, name, integer=True)


def row_chunks(n_rows: int, chunk: int | None) -> Iterator[tuple[int, int]]:
    """`(start, stop)` ranges covering `range(n_rows)` in pieces of at most `chunk` rows.

    Example:
        >>> list(row_chunks(5, 2))
        [(0, 2), (2, 4), (4, 5)]
    """
    size = n_rows if chunk is None else chunk
    for start in range(0, n_rows, max(size, 1)):
        yield start, min(start + size, n_rows)
