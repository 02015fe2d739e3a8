"""Argument checks and small helpers shared by the monitors."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from torchmetrics import Metric

from robust_train._validation import check_choice, check_positive

NameOrCallable = str | Callable[..., Any]


def check_explainer(
    explainer: object, name: str, *, differentiable: bool = False
) -> NameOrCallable:
    """Check an explainer name (one of `robust_train.explain.EXPLAINERS`) or callable.

    Example:
        >>> check_explainer("saliency", "explainer")
        'saliency'
        >>> check_explainer("nope", "explainers")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: Unknown `explainers` 'nope'; expected one of [...] or a callable
    """
    from robust_train.explain import EXPLAINERS, is_differentiable

    if isinstance(explainer, str):
        if explainer not in EXPLAINERS:
            raise ValueError(
                f"Unknown `{name}` {explainer!r}; expected one of {list(EXPLAINERS)} or a callable"
            )
    elif not callable(explainer):
        raise TypeError(
            f"`{name}` must be an explainer name or a callable "
            f"explainer(model, inputs, target, *, create_graph=False), got {explainer!r}"
        )
    if differentiable and not is_differentiable(explainer):  # type: ignore[arg-type]
        raise ValueError(
            f"`{name}` {explainer_name(explainer)!r} is not differentiable, so gradient "
            "attacks cannot target it; use a gradient explainer such as 'saliency'"
        )
    return explainer  # type: ignore[return-value]


def check_names(
    values: object, name: str, choices: Sequence[str] | None = None, *, differentiable: bool = False
) -> tuple[Any, ...]:
    """A non-empty tuple of distinct choices (a single value is accepted); explainers when
    `choices` is None.

    Example:
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


def check_optional_positive(value: object, name: str, *, integer: bool = False) -> None:
    """None, or a number > 0."""
    if value is not None:
        check_positive(value, name, integer=integer)


def explainer_name(explainer: object) -> str:
    """The name used in logged keys: the string itself, or the callable's `__name__`.

    Example:
        >>> from robust_train.explain import saliency
        >>> explainer_name(saliency), explainer_name("input_x_gradient")
        ('saliency', 'input_x_gradient')
    """
    if isinstance(explainer, str):
        return explainer
    return str(getattr(explainer, "__name__", type(explainer).__name__))


def compute_quietly(metric: Metric) -> Any:
    """`metric.compute()` (a collective under DDP: every rank calls it, even with nothing to add)
    without torchmetrics' warning about a rank whose shard had no images."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*was called before the ``update`` method.*")
        return metric.compute()
