"""Explainers by name, with what each can do declared where it is registered.

`EXPLAINERS` maps a name to its `ExplainerSpec` (iterating gives the names). A new explainer is
ONE file whose function is decorated with `@register_explainer("name", ...)`; importing the
package finds it (`robust_train.core.registry.discover`). The decorator records the explainer's
capabilities on the spec; every caller reads them there, never a table of its own:

- `differentiable`: the map keeps a graph to the input with `create_graph=True` (attacks and
  penalties refuse an explainer that cannot, e.g. an optimised mask);
- `piecewise_constant`: on a ReLU network the map is piecewise constant in the input (the
  gradient family), so its input gradient is exactly 0 almost everywhere and attack and ascent
  directions are taken on the softplus surrogate (`robust_train.models.softplus.smooth_relus`);
- `layer`: it explains through an intermediate layer given by module name (`layer=...`), looked
  up on the model it is handed at call time;
- `from_logits`: it can be computed from a forward pass the caller already ran (saliency and
  input x gradient: the gradient of the target logit), which the training penalties reuse;
- `settings`: evaluation settings its options follow (`{"ig_steps": "n_steps"}`: the evaluation's
  `ig_steps` is passed as `n_steps`), read by `bind_settings`;
- `reported`: one of the maps users act on, which the leaderboard, the demo and the benchmark
  pages report a column for (`reported_explainers()`);
- `model_free`: the map does not depend on the model (the reference "map = input"): its value
  and its input gradient are the same for every model and every surrogate of it, so an attack
  takes one direction and no surrogate beta (the model is called at most to check `target`).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from torch import Tensor, nn

from robust_train.core.registry import Registry
from robust_train.explain.protocol import Explainer

F = TypeVar("F", bound=Callable[..., Any])
FromLogits = Callable[[Tensor, Tensor, Tensor, bool], Tensor]

__all__ = [
    "EXPLAINERS",
    "BoundExplainer",
    "Explainer",
    "ExplainerSpec",
    "bind_settings",
    "explainer_name",
    "explainer_spec",
    "get_explainer",
    "is_differentiable",
    "register_explainer",
    "reported_explainers",
    "resolve_explainer",
]


@dataclass(frozen=True)
class ExplainerSpec:
    """An explainer function and its declared capabilities (see the module docstring)."""

    name: str
    function: Callable[..., Tensor]
    differentiable: bool = True
    piecewise_constant: bool = True
    layer: bool = False
    from_logits: FromLogits | None = None
    settings: Mapping[str, str] = field(default_factory=dict)
    reported: bool = False
    model_free: bool = False


EXPLAINERS: Registry[ExplainerSpec] = Registry("EXPLAINERS", "explainer")


def register_explainer(
    name: str,
    *,
    differentiable: bool = True,
    piecewise_constant: bool = True,
    layer: bool = False,
    from_logits: FromLogits | None = None,
    settings: Mapping[str, str] | None = None,
    reported: bool = False,
    model_free: bool = False,
) -> Callable[[F], F]:
    """Decorator: register an explainer function under `name`, with its capabilities.

    The function follows the `Explainer` protocol: `fn(model, inputs, target, *,
    create_graph=False, **options) -> Tensor`. The keyword arguments declare what it can do
    (module docstring); `settings` must name options the function takes.

    Raises:
        ValueError: `name` is not an identifier, or is registered already.
        TypeError: the decorated object is not callable, or `settings` names an option the
            function does not take.

    Examples:
        >>> from robust_train.explain.gradient import saliency
        >>> @register_explainer("doc_gradient_sign")
        ... def gradient_sign(model, inputs, target, *, create_graph=False):
        ...     return saliency(model, inputs, target, create_graph=create_graph).sign()
        >>> resolve_explainer("doc_gradient_sign", differentiable=True)[1]
        'doc_gradient_sign'
        >>> explainer_spec("doc_gradient_sign").piecewise_constant
        True
        >>> _ = EXPLAINERS.pop("doc_gradient_sign")
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"an explainer name must be an identifier, got {name!r}")

    def decorate(fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"register_explainer({name!r}) decorates callables, got {fn!r}")
        spec = ExplainerSpec(
            name=name,
            function=fn,
            differentiable=differentiable,
            piecewise_constant=piecewise_constant,
            layer=layer,
            from_logits=from_logits,
            settings=MappingProxyType(dict(settings or {})),
            reported=reported,
            model_free=model_free,
        )
        given = dict.fromkeys(spec.settings.values())
        _check_keywords(fn, given, f"register_explainer({name!r}, settings=...)")
        EXPLAINERS.add(name, spec, defined_by=fn)
        fn.__explainer_spec__ = spec  # type: ignore[attr-defined]
        return fn

    return decorate


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
        return explainer_spec(self).differentiable

    def __repr__(self) -> str:
        args = ", ".join(f"{key}={_short(value)}" for key, value in self.keywords.items())
        return f"{self.__name__}({args})"


def reported_explainers() -> tuple[str, ...]:
    """The maps the leaderboard, the demo and the benchmark pages report, in registration order.

    Examples:
        >>> reported_explainers()
        ('saliency', 'integrated_gradients', 'grad_cam', 'lrp', 'deeplift')
    """
    return tuple(name for name, spec in EXPLAINERS.items() if spec.reported)


def explainer_spec(explainer: object) -> ExplainerSpec:
    """The capabilities of an explainer given by name, registered function or any callable.

    A `BoundExplainer` (or functools.partial) has the spec of its function, made
    non-differentiable / non-piecewise-constant by a wrapped `explainer` argument that is; an
    unregistered callable gets the defaults, with `differentiable` read from its
    `differentiable` attribute (default True).

    Raises:
        ValueError: a name that is not registered (the message lists `EXPLAINERS`).

    Examples:
        >>> explainer_spec("integrated_gradients").settings["ig_steps"]
        'n_steps'
        >>> wrapped = get_explainer("smoothgrad", explainer="meaningful_perturbation")
        >>> explainer_spec(wrapped).differentiable
        False
    """
    if isinstance(explainer, str):
        if explainer not in EXPLAINERS:
            raise ValueError(
                f"Unknown explainer {explainer!r}; expected one of {list(EXPLAINERS)} or a callable"
            )
        return EXPLAINERS[explainer]
    spec = getattr(explainer, "__explainer_spec__", None)
    if isinstance(spec, ExplainerSpec):
        return spec
    func = getattr(explainer, "func", None)
    if func is not None and callable(func):
        outer = explainer_spec(func)
        keywords = getattr(explainer, "keywords", None) or {}
        inner = keywords.get("explainer")
        if inner is None:
            return outer
        inner_spec = explainer_spec(inner)
        return dataclasses.replace(
            outer,
            differentiable=outer.differentiable and inner_spec.differentiable,
            piecewise_constant=outer.piecewise_constant or inner_spec.piecewise_constant,
        )
    return ExplainerSpec(
        name=explainer_name(explainer),
        function=explainer,  # type: ignore[arg-type]
        differentiable=bool(getattr(explainer, "differentiable", True)),
    )


def get_explainer(name: str | Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
    """The explainer called `name` (one of `EXPLAINERS`), with `kwargs` bound.

    A callable is accepted in place of a name (returned as is, or bound to `kwargs`). For
    smoothgrad, an `explainer` given by name is resolved too. Keyword arguments the explainer
    does not take raise a TypeError here rather than at the first call.

    Raises:
        TypeError: a keyword argument the explainer does not take.
        ValueError: `name` is neither a registered name nor a callable.

    Examples:
        >>> explain = get_explainer("smoothgrad", explainer="input_x_gradient", n_samples=4)
        >>> explain.__name__, explain
        ('smoothgrad', smoothgrad(explainer=input_x_gradient, n_samples=4))
        >>> from robust_train.explain.gradient import saliency
        >>> get_explainer("saliency") is saliency, is_differentiable("meaningful_perturbation")
        (True, False)
    """
    if callable(name):
        func = name
    elif isinstance(name, str) and name in EXPLAINERS:
        func = EXPLAINERS[name].function
    else:
        raise ValueError(
            f"Unknown explainer {name!r}; expected one of {list(EXPLAINERS)} or a callable"
        )
    if not kwargs:
        return func
    if isinstance(kwargs.get("explainer"), str):
        kwargs["explainer"] = get_explainer(kwargs["explainer"])
    _check_keywords(func, kwargs, f"explainer {getattr(func, '__name__', func)!r}")
    return BoundExplainer(func, kwargs)


def bind_settings(explainer: object, settings: object) -> Callable[..., Any]:
    """The explainer with the options its spec ties to evaluation settings taken from `settings`
    (any object with those attributes, e.g. `EvaluationSettings`); options already bound win.

    Examples:
        >>> from types import SimpleNamespace
        >>> bind_settings("integrated_gradients", SimpleNamespace(ig_steps=4, ig_baseline=0.0))
        integrated_gradients(n_steps=4, baseline=0.0)
        >>> bind_settings("saliency", SimpleNamespace()).__name__
        'saliency'
    """
    spec = explainer_spec(explainer)
    bound = dict(getattr(explainer, "keywords", None) or {})
    options = {
        option: getattr(settings, setting)
        for setting, option in spec.settings.items()
        if option not in bound and getattr(settings, setting, None) is not None
    }
    if not options:
        return get_explainer(explainer) if isinstance(explainer, str) else explainer  # type: ignore[return-value]
    return get_explainer(spec.function, **bound, **options)


def is_differentiable(explainer: str | Callable[..., Any]) -> bool:
    """Whether `explainer` supports `create_graph=True` (attack targets, training penalties).

    Examples:
        >>> is_differentiable("saliency"), is_differentiable(get_explainer("smoothgrad"))
        (True, True)
    """
    return explainer_spec(explainer).differentiable


def explainer_name(explainer: object) -> str:
    """The name of an explainer: the string itself, or the callable's (or partial's) `__name__`.

    Examples:
        >>> explainer_name("saliency"), explainer_name(get_explainer("smoothgrad", n_samples=2))
        ('saliency', 'smoothgrad')
    """
    if isinstance(explainer, str):
        return explainer
    spec = getattr(explainer, "__explainer_spec__", None)
    if isinstance(spec, ExplainerSpec):
        return spec.name
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

    Returns:
        The explainer callable and its name.

    Raises:
        TypeError: `explainer` is neither a name nor a callable.
        ValueError: an unknown name, or (with `differentiable`) an explainer that cannot keep a
            graph.

    Examples:
        >>> resolve_explainer("saliency", differentiable=True)[1]
        'saliency'
        >>> resolve_explainer("meaningful_perturbation", differentiable=True)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `explainer` 'meaningful_perturbation' is not differentiable ...
    """
    if isinstance(explainer, str):
        if explainer not in EXPLAINERS:
            raise ValueError(
                f"Unknown `{name}` {explainer!r}; expected one of {list(EXPLAINERS)} or a callable"
            )
        func: Callable[..., Any] = EXPLAINERS[explainer].function
    elif callable(explainer):
        func = explainer
    else:
        raise TypeError(
            f"`{name}` must be a name or a callable explainer(model, inputs, target, *, "
            f"create_graph=False), got {explainer!r}"
        )
    label = explainer_name(explainer)
    if differentiable and not explainer_spec(func).differentiable:
        raise ValueError(
            f"`{name}` {label!r} is not differentiable with respect to the input (it optimises "
            "a mask), so it cannot be differentiated through (gradient attacks, penalties); use "
            "a gradient explainer such as 'saliency' (or objective='random_sign' in an attack)"
        )
    return func, label  # type: ignore[return-value]


def _check_keywords(func: Callable[..., Any], kwargs: dict[str, Any], what: str) -> None:
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):  # builtins or C callables: cannot check
        return
    try:
        signature.bind_partial(None, None, None, **kwargs)
    except TypeError as error:
        valid = [p.name for p in list(signature.parameters.values())[3:]]
        raise TypeError(
            f"{what} got invalid keyword arguments {sorted(kwargs)} ({error}); it takes {valid}"
        ) from None


def _short(value: Any) -> str:
    return getattr(value, "__name__", None) if callable(value) else repr(value)  # type: ignore[return-value]
