"""Argument checks and small helpers shared by the monitors."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from torchmetrics import Metric

from robust_train.core.runtime import check_optional_positive
from robust_train.core.validation import check_choice
from robust_train.explain.registry import explainer_name, resolve_explainer

__all__ = [
    "check_explainer",
    "check_names",
    "check_optional_positive",
    "compute_quietly",
    "explainer_name",
]

NameOrCallable = str | Callable[..., Any]


def check_explainer(
    explainer: object, name: str, *, differentiable: bool = False
) -> NameOrCallable:
    """Check an explainer name (one of `robust_train.explain.EXPLAINERS`) or callable, with the
    package's one resolver (`robust_train.explain.resolve_explainer`); return it unchanged.

    Examples:
        >>> check_explainer("saliency", "explainer")
        'saliency'
        >>> check_explainer("nope", "explainers")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: Unknown `explainers` 'nope'; expected one of [...] or a callable
    """
    resolve_explainer(explainer, differentiable=differentiable, name=name)
    return explainer  # type: ignore[return-value]


def check_names(
    values: object, name: str, choices: Sequence[str] | None = None, *, differentiable: bool = False
) -> tuple[Any, ...]:
    """A non-empty tuple of distinct choices (a single value is accepted); explainers when
    `choices` is None.

    Examples:
        >>> check_names("topk", "attacks", ("topk", "random_sign"))
        ('topk',)
    """
    single = isinstance(values, str) or callable(values)
    items = (values,) if single else tuple(values)  # type: ignore[arg-type]
    if not items:
        raise ValueError(f"`{name}` is empty: give at least one")
    for item in items:
        if choices is None:
            check_explainer(item, name, differentiable=differentiable)
        else:
            check_choice(item, name, choices)
    keys = [explainer_name(item) for item in items]
    if len(set(keys)) != len(keys):
        raise ValueError(f"`{name}` has duplicates: {keys}")
    return items


def compute_quietly(metric: Metric) -> Any:
    """`metric.compute()` (a collective under DDP: every rank calls it, even with nothing to add)
    without torchmetrics' warning about a rank whose shard had no images."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*was called before the ``update`` method.*")
        return metric.compute()
