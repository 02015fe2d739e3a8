"""Helpers shared by the explainers that multiply the batch: chunking, random generators, checks.

IG steps and SmoothGrad samples are laid out as extra rows of one large virtual batch; these rows
are forwarded in chunks of at most `internal_batch_size` rows (Captum issues 245 and 538 report the
out-of-memory errors that unchunked integrated gradients cause).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from robust_train._validation import check_positive


def check_internal_batch_size(value: object, name: str = "internal_batch_size") -> None:
    """Raise unless `value` is None (one forward for all rows) or a positive int.

    Example:
        >>> check_internal_batch_size(None); check_internal_batch_size(64)
    """
    if value is not None:
        check_positive(value, name, integer=True)


def row_chunks(n_rows: int, internal_batch_size: int | None) -> Iterator[tuple[int, int]]:
    """Yield `(start, stop)` ranges that cover `range(n_rows)` in chunks of the given size.

    Example:
        >>> list(row_chunks(5, 2))
        [(0, 2), (2, 4), (4, 5)]
        >>> list(row_chunks(5, None))
        [(0, 5)]
    """
    size = n_rows if internal_batch_size is None else internal_batch_size
    for start in range(0, n_rows, size):
        yield start, min(start + size, n_rows)


def check_grad_available(name: str) -> None:
    """Raise a clear error under `torch.inference_mode`, where no gradient can be taken.

    Lightning runs validation under inference mode and `torch.enable_grad()` does not undo it.
    """
    if torch.is_inference_mode_enabled():
        raise RuntimeError(
            f"`{name}` needs gradients but was called under torch.inference_mode (Lightning runs "
            "validation and test loops under it); call it from a training hook or use "
            "Trainer(inference_mode=False)"
        )


def make_generator(
    generator: torch.Generator | None, seed: int | None, device: torch.device
) -> torch.Generator | None:
    """The random generator to draw from: the given one, a fresh one from `seed`, or None (global).

    A `seed` gives a new generator at every call, so the same call always draws the same numbers
    (the "fixed noise" that makes a stochastic explainer a deterministic function of its input).

    Example:
        >>> g = make_generator(None, 3, torch.device("cpu"))
        >>> torch.equal(torch.rand(2, generator=g), torch.rand(2, generator=torch.manual_seed(3)))
        True
    """
    if generator is not None and seed is not None:
        raise ValueError("pass either `generator` or `seed`, not both")
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"`generator` must be a torch.Generator, got {type(generator).__name__}")
        return generator
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"`seed` must be an int, got {seed!r}")
    return torch.Generator(device=device).manual_seed(seed)


def randn_like_rows(
    shape: tuple[int, ...], generator: torch.Generator | None, like: Tensor
) -> Tensor:
    """Standard normal numbers of `shape`, drawn from `generator` (or the global generator).

    Drawn on the generator's device and moved to `like`'s device and dtype, so a CPU generator
    can drive a computation on an accelerator.
    """
    device = like.device if generator is None else generator.device
    z = torch.randn(shape, generator=generator, device=device, dtype=like.dtype)
    return z.to(like.device)


def randint_pair(high: int, generator: torch.Generator | None) -> tuple[int, int]:
    """Two integers in [0, high), e.g. a random (dy, dx) shift."""
    device = torch.device("cpu") if generator is None else generator.device
    values = torch.randint(0, high, (2,), generator=generator, device=device)
    return int(values[0]), int(values[1])
