"""Argument checks shared by every public function.

Each check names the argument and the offending value in its error, so that a user who passes a
wrong tensor into an explainer, an attack or a metric learns which argument is wrong and why.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor

__all__ = [
    "check_images",
    "check_target",
    "check_maps",
    "check_same_shape",
    "check_positive",
    "check_positive_ints",
    "check_non_negative",
    "check_choice",
    "check_finite",
    "check_probability",
    "check_bool",
]


def _describe(t: Tensor) -> str:
    return f"Tensor(shape={tuple(t.shape)}, dtype={t.dtype})"


def check_images(inputs: object, name: str = "inputs", *, check_range: bool = True) -> Tensor:
    """Check a batch of images: a float tensor (B, C, H, W), B >= 1, finite, values in [0, 1].

    Examples:
        >>> check_images(torch.rand(2, 1, 8, 8)).shape
        torch.Size([2, 1, 8, 8])
    """
    if not isinstance(inputs, Tensor):
        raise TypeError(
            f"`{name}` must be a torch.Tensor of images (B, C, H, W), got {type(inputs).__name__}"
        )
    if inputs.dim() != 4:
        raise ValueError(f"`{name}` must have shape (B, C, H, W), got {_describe(inputs)}")
    if not inputs.is_floating_point():
        raise TypeError(
            f"`{name}` must be a floating point tensor with values in [0, 1], "
            f"got {_describe(inputs)}"
        )
    if inputs.shape[0] == 0:
        raise ValueError(f"`{name}` is an empty batch: {_describe(inputs)}")
    check_finite(inputs, name)
    if check_range:
        lo, hi = float(inputs.min()), float(inputs.max())
        if lo < -1e-6 or hi > 1 + 1e-6:
            raise ValueError(
                f"`{name}` must be images in [0, 1] (normalisation belongs inside the model), "
                f"got values in [{lo:.4g}, {hi:.4g}]"
            )
    return inputs


def check_target(
    target: object, batch_size: int, name: str = "target", num_classes: int | None = None
) -> Tensor:
    """Check class indices: an integer tensor (B,) matching the batch size.

    Args:
        target: the class indices to check.
        batch_size: B, the batch they label.
        name: the argument's name, for the error.
        num_classes: when given, every index must be below it.

    Returns:
        `target` as int64.

    Raises:
        TypeError: `target` is not an integer tensor.
        ValueError: its shape is not (batch_size,), or an index is negative or >= num_classes.

    Examples:
        >>> check_target(torch.tensor([0, 2], dtype=torch.int32), 2).dtype
        torch.int64
        >>> check_target(torch.tensor([0, 3]), 2, num_classes=3)
        Traceback (most recent call last):
        ...
        ValueError: `target` holds class index 3 but the model has 3 classes
    """
    if not isinstance(target, Tensor):
        raise TypeError(
            f"`{name}` must be a LongTensor of class indices (B,), got {type(target).__name__}"
        )
    if target.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
        raise TypeError(
            f"`{name}` must be an integer tensor of class indices, got {_describe(target)}"
        )
    if target.dim() != 1 or target.shape[0] != batch_size:
        raise ValueError(
            f"`{name}` must have shape ({batch_size},) to match the batch, got {_describe(target)}"
        )
    if target.numel() and int(target.min()) < 0:
        raise ValueError(f"`{name}` holds a negative class index: {int(target.min())}")
    if num_classes is not None and target.numel() and int(target.max()) >= num_classes:
        raise ValueError(
            f"`{name}` holds class index {int(target.max())} but the model has "
            f"{num_classes} classes"
        )
    return target.long()


def check_maps(maps: object, name: str) -> Tensor:
    """Check a batch of importance maps (B, H, W): float, non-empty, finite; return them.

    Raises:
        TypeError: `maps` is not a floating point tensor.
        ValueError: its shape is not (B, H, W) with B >= 1, or it holds NaN or inf.

    Examples:
        >>> check_maps(torch.zeros(2, 4, 4), "maps").shape
        torch.Size([2, 4, 4])
        >>> check_maps(torch.zeros(2, 1, 4, 4), "maps")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `maps` must have shape (B, H, W), got ...
    """
    if not isinstance(maps, Tensor):
        raise TypeError(
            f"`{name}` must be a tensor of importance maps (B, H, W), got {type(maps).__name__}"
        )
    if maps.dim() != 3:
        raise ValueError(f"`{name}` must have shape (B, H, W), got {_describe(maps)}")
    if maps.shape[0] == 0:
        raise ValueError(f"`{name}` is an empty batch: {_describe(maps)}")
    if not maps.is_floating_point():
        raise TypeError(f"`{name}` must be a floating point tensor, got {_describe(maps)}")
    check_finite(maps, name)
    return maps


def check_same_shape(a: Tensor, b: Tensor, name_a: str, name_b: str) -> None:
    """Raise a ValueError naming both when two tensors that must align differ in shape.

    Examples:
        >>> check_same_shape(torch.zeros(2, 3), torch.ones(2, 3), "a", "b")
        >>> check_same_shape(torch.zeros(2, 3), torch.ones(3, 2), "a", "b")
        Traceback (most recent call last):
        ...
        ValueError: `a` and `b` must have the same shape, got (2, 3) and (3, 2)
    """
    if a.shape != b.shape:
        raise ValueError(
            f"`{name_a}` and `{name_b}` must have the same shape, "
            f"got {tuple(a.shape)} and {tuple(b.shape)}"
        )


def check_positive(value: object, name: str, *, integer: bool = False) -> None:
    """Raise unless `value` is a finite number > 0 (an int when `integer`).

    Raises:
        TypeError: `value` is not a number (a bool is not), or not an int when `integer`.
        ValueError: it is not finite, or not > 0.

    Examples:
        >>> check_positive(0.5, "epsilon")
        >>> check_positive(0, "n_steps", integer=True)
        Traceback (most recent call last):
        ...
        ValueError: `n_steps` must be > 0, got 0
        >>> check_positive(2.0, "n_steps", integer=True)
        Traceback (most recent call last):
        ...
        TypeError: `n_steps` must be an int, got 2.0
    """
    _check_number(value, name, integer)
    if not value > 0:  # type: ignore[operator]
        raise ValueError(f"`{name}` must be > 0, got {value!r}")


def check_positive_ints(**values: object) -> None:
    """`check_positive(value, name, integer=True)` for every `name=value`, in the order given.

    Examples:
        >>> check_positive_ints(in_channels=1, num_classes=0)
        Traceback (most recent call last):
        ...
        ValueError: `num_classes` must be > 0, got 0
    """
    for name, value in values.items():
        check_positive(value, name, integer=True)


def check_non_negative(value: object, name: str, *, integer: bool = False) -> None:
    """Raise unless `value` is a finite number >= 0 (an int when `integer`).

    Raises:
        TypeError: `value` is not a number (a bool is not), or not an int when `integer`.
        ValueError: it is not finite, or negative.

    Examples:
        >>> check_non_negative(0, "weight")
        >>> check_non_negative(-0.1, "weight")
        Traceback (most recent call last):
        ...
        ValueError: `weight` must be >= 0, got -0.1
    """
    _check_number(value, name, integer)
    if not value >= 0:  # type: ignore[operator]
        raise ValueError(f"`{name}` must be >= 0, got {value!r}")


def check_probability(value: object, name: str) -> None:
    """Raise unless `value` is a number with 0 <= value <= 1.

    Raises:
        TypeError: `value` is not a number.
        ValueError: it is not finite, or outside [0, 1].

    Examples:
        >>> check_probability(1.0, "batch_fraction")
        >>> check_probability(1.5, "batch_fraction")
        Traceback (most recent call last):
        ...
        ValueError: `batch_fraction` must lie in [0, 1], got 1.5
    """
    _check_number(value, name, False)
    if not 0 <= value <= 1:  # type: ignore[operator]
        raise ValueError(f"`{name}` must lie in [0, 1], got {value!r}")


def check_bool(value: object, name: str) -> None:
    """Raise unless `value` is a bool (True or False, not a number standing for one).

    Raises:
        TypeError: `value` is not a bool.

    Examples:
        >>> check_bool(True, "random_start")
        >>> check_bool(1, "random_start")
        Traceback (most recent call last):
        ...
        TypeError: `random_start` must be a bool, got 1
    """
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be a bool, got {value!r}")


def _check_number(value: object, name: str, integer: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "an int" if integer else "a number"
        raise TypeError(f"`{name}` must be {kind}, got {value!r}")
    if integer and not isinstance(value, int):
        raise TypeError(f"`{name}` must be an int, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"`{name}` must be finite, got {value!r}")


def check_choice(value: object, name: str, choices: Iterable[str]) -> str:
    """Return `value` if it is one of `choices`; else raise a ValueError listing them.

    Examples:
        >>> check_choice("l2", "norm", ("linf", "l2"))
        'l2'
        >>> check_choice("l1", "norm", ("linf", "l2"))
        Traceback (most recent call last):
        ...
        ValueError: Unknown `norm` 'l1'; expected one of ['linf', 'l2']
    """
    options = list(choices)
    if value not in options:
        raise ValueError(f"Unknown `{name}` {value!r}; expected one of {options}")
    return value  # type: ignore[return-value]


def check_finite(t: Tensor, name: str) -> Tensor:
    """Return `t` if every value is finite; else raise a ValueError counting NaN and inf.

    Examples:
        >>> check_finite(torch.tensor([1.0, float("nan"), float("inf")]), "maps")
        Traceback (most recent call last):
        ...
        ValueError: `maps` holds 2 non-finite value(s) (NaN or inf)
    """
    if not bool(torch.isfinite(t).all()):
        n_bad = int((~torch.isfinite(t)).sum())
        raise ValueError(f"`{name}` holds {n_bad} non-finite value(s) (NaN or inf)")
    return t
