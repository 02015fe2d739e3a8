"""Registries by name, defined once: explainers, penalties, attack objectives, evaluation parts.

`Registry` is a dict (name -> registered thing) that iterates in registration order and shows
its names; `class_decorator` is the one way a class registers itself under a name: the name must
be an identifier, the class a subclass of the registry's base, and a name taken by another class
is refused (a re-import of the same class is not a clash). Each registry keeps its own error
wording for lookups (`lookup`), naming the caller's argument and the registered names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Registry", "class_decorator", "lookup"]

V = TypeVar("V")
C = TypeVar("C", bound=type)


class Registry(dict[str, V]):
    """name -> registered object; iterating gives the names, in registration order.

    Example:
        >>> r: Registry[int] = Registry("THINGS")
        >>> r["a"] = 1
        >>> r
        THINGS(['a'])
    """

    def __init__(self, title: str) -> None:
        super().__init__()
        self.title = title

    def __repr__(self) -> str:
        return f"{self.title}({list(self)})"


def _path(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', repr(obj))}"


def class_decorator(registry: Registry[Any], name: str, base: type, kind: str) -> Callable[[C], C]:
    """The decorator that registers a subclass of `base` under `name` and sets its `name`.

    Example:
        >>> class Base:
        ...     name = ""
        >>> r: Registry[type] = Registry("DOC")
        >>> @class_decorator(r, "one", Base, "doc thing")
        ... class One(Base):
        ...     pass
        >>> r["one"].name
        'one'
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a {kind} name must be an identifier, got {name!r}")

    def decorate(cls: C) -> C:
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise TypeError(f"`{name}` must be a {base.__name__} subclass, got {cls!r}")
        taken = registry.get(name)
        if taken is not None and _path(taken) != _path(cls):
            raise ValueError(f"{kind} {name!r} is already registered ({taken})")
        cls.name = name  # type: ignore[attr-defined]
        registry[name] = cls
        return cls

    return decorate


def lookup(registry: Registry[V], name: object, argument: str) -> V:
    """`registry[name]`, or a ValueError naming `argument`, the value and the registered names.

    Example:
        >>> lookup(Registry("DOC"), "x", "thing")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: Unknown `thing` 'x'; expected one of []
    """
    if not isinstance(name, str) or name not in registry:
        raise ValueError(f"Unknown `{argument}` {name!r}; expected one of {list(registry)}")
    return registry[name]
