"""Explainers by name, for configs: `get_explainer("smoothgrad", n_samples=8)`.

`EXPLAINERS` is the registry (name -> function; iterating gives the names). A new explainer is
one file whose function is decorated with `@register_explainer("name")` (pass
`differentiable=False` for an optimisation that cannot keep a graph); every caller that takes an
explainer by name (attacks, metrics, penalties, monitors, the evaluation suite) then accepts it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from torch import Tensor, nn

from robust_train.explain.gradient import input_x_gradient, saliency
from robust_train.explain.integrated import integrated_gradients
from robust_train.explain.perturbation import meaningful_perturbation
from robust_train.explain.protocol import Explainer
from robust_train.explain.smooth import smoothgrad

F = TypeVar("F", bound=Callable[..., Any])


class _Registry(dict[str, Callable[..., Any]]):
    """name -> explainer function; iterating gives the names, in registration order."""

    def __repr__(self) -> str:
        return f"EXPLAINERS({list(self)})"


EXPLAINERS: _Registry = _Registry()
_FUNCTIONS = EXPLAINERS


def register_explainer(name: str, *, differentiable: bool = True) -> Callable[[F], F]:
    """Decorator: register an explainer function under `name`.

    The function follows the `Explainer` protocol: `fn(model, inputs, target, *,
    create_graph=False, **options) -> Tensor`. With `differentiable=False` it is marked as one
    that cannot keep a graph (`is_differentiable` False), so attacks and penalties refuse it.

    Example:
        >>> @register_explainer("doc_gradient_sign")
        ... def gradient_sign(model, inputs, target, *, create_graph=False):
        ...     return saliency(model, inputs, target, create_graph=create_graph).sign()
        >>> resolve_explainer("doc_gradient_sign", differentiable=True)[1]
        'doc_gradient_sign'
        >>> _ = EXPLAINERS.pop("doc_gradient_sign")
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"an explainer name must be an identifier, got {name!r}")

    def decorate(fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"register_explainer({name!r}) decorates callables, got {fn!r}")
        if name in EXPLAINERS and EXPLAINERS[name] is not fn:
            raise ValueError(f"explainer {name!r} is already registered ({EXPLAINERS[name]!r})")
        if not differentiable:
            fn.differentiable = False  # type: ignore[attr-defined]
        EXPLAINERS[name] = fn
        return fn

    return decorate


for _name, _function in (
    ("saliency", saliency),
    ("input_x_gradient", input_x_gradient),
    ("integrated_gradients", integrated_gradients),
    ("smoothgrad", smoothgrad),
    ("meaningful_perturbation", meaningful_perturbation),
):
    register_explainer(_name)(_function)


class BoundExplainer:
    """An explainer with keyword arguments bound (like functools.partial, but readable).

    `__name__` is the explainer's name, `repr` shows the bound arguments, keyword arguments given
    at call time override the bound ones, and instances pickle (module-level class).
    """

    def __init__(self, func: Callable[..., Any], keywords: dict[str, Any]) -> None:
        self.func = func
        self.keywords = dict(keywords)
        self.__name__ = getattr(func, "__name__", type(func).__name__)
        self.__doc__ = func.__doc__

    def __call__(self, model: nn.Module, inputs: Tensor, target: Tensor, **kwargs: Any) -> Any:
        return self.func(model, inputs, target, **{**self.keywords, **kwargs})

    @property
    def differentiable(self) -> bool:
        """False when the function or a wrapped `explainer` argument is not differentiable."""
        inner = self.keywords.get("explainer")
        return is_differentiable(self.func) and (inner is None or is_differentiable(inner))

    def __repr__(self) -> str:
        args = ", ".join(f"{key}={_short(value)}" for key, value in self.keywords.items())
        return f"{self.__name__}({args})"


def get_explainer(name: str | Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
    """The explainer called `name` (one of `EXPLAINERS`), with `kwargs` bound.

    A callable is accepted in place of a name (returned as is, or bound to `kwargs`). For
    smoothgrad, an `explainer` given by name is resolved too. Keyword arguments the explainer
    does not take raise a TypeError now rather than at the first call.

    Example:
        >>> explain = get_explainer("smoothgrad", explainer="input_x_gradient", n_samples=4)
        >>> explain.__name__, explain
        ('smoothgrad', smoothgrad(explainer=input_x_gradient, n_samples=4))
        >>> get_explainer("saliency") is saliency, is_differentiable("meaningful_perturbation")
        (True, False)
    """
    if callable(name):
        func = name
    elif isinstance(name, str) and name in _FUNCTIONS:
        func = _FUNCTIONS[name]
    else:
        raise ValueError(
            f"Unknown explainer {name!r}; expected one of {list(EXPLAINERS)} or a callable"
        )
    if not kwargs:
        return func
    if isinstance(kwargs.get("explainer"), str):
        kwargs["explainer"] = get_explainer(kwargs["explainer"])
    _check_keywords(func, kwargs)
    return BoundExplainer(func, kwargs)


def is_differentiable(explainer: str | Callable[..., Any]) -> bool:
    """Whether `explainer` supports `create_graph=True` (attack targets, training penalties).

    Reads a `differentiable` attribute (False on meaningful_perturbation), looking through
    BoundExplainer and functools.partial wrappers and their `explainer` argument; default True.

    Example:
        >>> is_differentiable(saliency), is_differentiable(get_explainer("smoothgrad"))
        (True, True)
    """
    if isinstance(explainer, str):
        explainer = get_explainer(explainer)
    if not getattr(explainer, "differentiable", True):
        return False
    func = getattr(explainer, "func", None)
    keywords = getattr(explainer, "keywords", None) or {}
    if func is not None and not isinstance(explainer, BoundExplainer):
        if not is_differentiable(func):
            return False
        inner = keywords.get("explainer")
        return inner is None or is_differentiable(inner)
    return True


def explainer_name(explainer: object) -> str:
    """The name of an explainer: the string itself, or the callable's (or partial's) `__name__`.

    Example:
        >>> explainer_name("saliency"), explainer_name(get_explainer("smoothgrad", n_samples=2))
        ('saliency', 'smoothgrad')
    """
    if isinstance(explainer, str):
        return explainer
    name = getattr(explainer, "__name__", None) or getattr(
        getattr(explainer, "func", None), "__name__", None
    )
    return str(name or type(explainer).__name__)


def resolve_explainer(
    explainer: object, *, differentiable: bool, name: str = "explainer"
) -> tuple[Explainer, str]:
    """The one explainer resolver: `(callable, name)` for a registered name or a callable.

    Every caller that takes an explainer (attacks, metrics, penalties, monitors, evaluation)
    resolves it here, so that bad values fail the same way, at construction, naming the argument
    `name`: a value that is neither a name nor a callable raises TypeError, an unknown name
    ValueError listing `EXPLAINERS`, and with `differentiable=True` an explainer that cannot keep
    a graph (`is_differentiable` False: meaningful perturbation optimises a mask) ValueError.

    Args:
        explainer: a name in `EXPLAINERS` or a callable following the `Explainer` protocol.
        differentiable: the caller differentiates through the map (an attack direction, a
            training penalty, a gradient Lipschitz search).
        name: the caller's argument name, used in errors.

    Example:
        >>> resolve_explainer("saliency", differentiable=True) == (saliency, "saliency")
        True
        >>> resolve_explainer("meaningful_perturbation", differentiable=True)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `explainer` 'meaningful_perturbation' is not differentiable ...
    """
    if isinstance(explainer, str):
        if explainer not in _FUNCTIONS:
            raise ValueError(
                f"Unknown `{name}` {explainer!r}; expected one of {list(EXPLAINERS)} or a callable"
            )
        func: Callable[..., Any] = _FUNCTIONS[explainer]
    elif callable(explainer):
        func = explainer
    else:
        raise TypeError(
            f"`{name}` must be a name or a callable explainer(model, inputs, target, *, "
            f"create_graph=False), got {explainer!r}"
        )
    label = explainer_name(explainer)
    if differentiable and not is_differentiable(func):
        raise ValueError(
            f"`{name}` {label!r} is not differentiable with respect to the input (it optimises "
            "a mask), so it cannot be differentiated through (gradient attacks, penalties); use "
            "a gradient explainer such as 'saliency' (or objective='random_sign' in an attack)"
        )
    return func, label  # type: ignore[return-value]


def _check_keywords(func: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):  # builtins or C callables: cannot check
        return
    try:
        signature.bind_partial(None, None, None, **kwargs)
    except TypeError as error:
        valid = [p.name for p in list(signature.parameters.values())[3:]]
        raise TypeError(
            f"explainer {getattr(func, '__name__', func)!r} got invalid keyword arguments "
            f"{sorted(kwargs)} ({error}); it takes {valid}"
        ) from None


def _short(value: Any) -> str:
    return getattr(value, "__name__", None) if callable(value) else repr(value)  # type: ignore[return-value]


__all__ = [
    "EXPLAINERS",
    "BoundExplainer",
    "Explainer",
    "explainer_name",
    "get_explainer",
    "is_differentiable",
    "register_explainer",
    "resolve_explainer",
]
