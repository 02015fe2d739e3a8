"""The one registry: explainers, penalties, attack objectives, evaluation parts, models, data.

A `Registry` maps a name to the registered thing and iterates in registration order. Everything
that registers goes through `Registry.add`: the name must be an identifier, and a name taken by
another object is refused (a re-import of the same object is not a clash). `Registry.lookup` is
the one lookup, with the one error wording: it names the caller's argument, the value and the
registered names. `Registry.class_decorator` is how a class registers itself.

`discover(package)` imports every module of a package (and of its subpackages), so that an
implementation is ONE file: dropping it into the package registers it, with no list to edit.
Modules are imported in sorted order, so the registration order is the same on every machine.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["Registry", "discover", "object_path"]

V = TypeVar("V")
C = TypeVar("C", bound=type)


def object_path(obj: Any) -> str:
    """`module.qualname` of a class or function (how two registrations are told apart).

    Examples:
        >>> object_path(Registry)
        'robust_train.core.registry.Registry'
    """
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', repr(obj))}"


class Registry(dict[str, V]):
    """name -> registered object; iterating gives the names, in registration order.

    Args:
        title: shown by `repr` (the registry's public name, e.g. "EXPLAINERS").
        kind: what one entry is, for errors ("explainer", "penalty").

    Examples:
        >>> things: Registry[int] = Registry("THINGS", "thing")
        >>> things.add("a", 1)
        1
        >>> things, things.lookup("a", "thing")
        (THINGS(['a']), 1)
        >>> things.lookup("b", "thing")
        Traceback (most recent call last):
        ...
        ValueError: Unknown `thing` 'b'; expected one of ['a']
    """

    def __init__(self, title: str, kind: str = "entry") -> None:
        super().__init__()
        self.title = title
        self.kind = kind
        self._defined_by: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"{self.title}({list(self)})"

    def add(self, name: str, value: V, *, defined_by: object | None = None) -> V:
        """Register `value` under `name`. `defined_by` (default `value`: a class, or the
        function an explainer spec wraps) tells a re-import of the same definition, which is no
        clash, from another definition of the name, which is refused."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"a {self.kind} name must be an identifier, got {name!r}")
        path = object_path(value if defined_by is None else defined_by)
        if name in self and self._defined_by[name] != path:
            raise ValueError(f"{self.kind} {name!r} is already registered ({self[name]!r})")
        self[name] = value
        self._defined_by[name] = path
        return value

    def add_all(self, entries: Mapping[str, V]) -> None:
        """`add` every name -> value of `entries`, in their order."""
        for name, value in entries.items():
            self.add(name, value)

    def pop(self, name: str, *default: Any) -> Any:  # type: ignore[override]
        self._defined_by.pop(name, None)
        return super().pop(name, *default)

    def lookup(self, name: object, argument: str) -> V:
        """`self[name]`, or a ValueError naming `argument`, the value and the registered names."""
        if not isinstance(name, str) or name not in self:
            raise ValueError(f"Unknown `{argument}` {name!r}; expected one of {list(self)}")
        return self[name]

    def class_decorator(
        self,
        name: str,
        base: type,
        *,
        attribute: str = "name",
        keep_own: bool = False,
        check: Callable[[type], None] | None = None,
    ) -> Callable[[C], C]:
        """The decorator that registers a subclass of `base` under `name` and sets its `name`.

        Args:
            name: the registered name (an identifier).
            base: the class every registered one must subclass.
            attribute: the class attribute set to `name`.
            keep_own: leave `attribute` alone where the class defines its own.
            check: run on the class before it is registered (raises to refuse it).

        Examples:
            >>> class Base:
            ...     name = ""
            >>> r: Registry[type] = Registry("DOC", "doc thing")
            >>> @r.class_decorator("one", Base)
            ... class One(Base):
            ...     pass
            >>> r["one"].name
            'one'
        """
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"a {self.kind} name must be an identifier, got {name!r}")

        def decorate(cls: C) -> C:
            if not (isinstance(cls, type) and issubclass(cls, base)):
                raise TypeError(f"`{name}` must be a {base.__name__} subclass, got {cls!r}")
            if check is not None:
                check(cls)
            self.add(name, cls)  # type: ignore[arg-type]
            if not (keep_own and attribute in cls.__dict__):
                setattr(cls, attribute, name)
            return cls

        return decorate

    def registrar(
        self,
        base: type,
        *,
        attribute: str = "name",
        keep_own: bool = False,
        check: Callable[[type], None] | None = None,
    ) -> Callable[[str], Callable[[C], C]]:
        """The public `register_<kind>(name)` of this registry: a class decorator factory that
        registers a subclass of `base` (`class_decorator`, with these arguments).

        Examples:
            >>> class Base:
            ...     name = ""
            >>> r: Registry[type] = Registry("DOC", "widget")
            >>> register_widget = r.registrar(Base)
            >>> @register_widget("two")
            ... class Two(Base):
            ...     pass
            >>> Two.name, register_widget.__name__
            ('two', 'register_widget')
            >>> register_widget("three")(int)  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            TypeError: `three` must be a Base subclass, got <class 'int'>
        """

        def register(name: str) -> Callable[[C], C]:
            return self.class_decorator(
                name, base, attribute=attribute, keep_own=keep_own, check=check
            )

        register.__name__ = register.__qualname__ = f"register_{self.kind}"
        register.__doc__ = (
            f"Class decorator: register a `{base.__name__}` subclass in {self.title} under "
            f"`name` (an identifier not taken by another class), and set its `{attribute}`."
        )
        return register


def discover(package: str) -> list[str]:
    """Import every module of `package` and of its subpackages, in sorted order; returns their
    names. A package's `__init__` calls `discover(__name__)` so that each implementation file
    registers itself on import.

    Examples:
        >>> "robust_train.explain.gradient" in discover("robust_train.explain")
        True
    """
    root = importlib.import_module(package)
    found = []
    for info in sorted(pkgutil.walk_packages(root.__path__, package + "."), key=lambda i: i.name):
        importlib.import_module(info.name)
        found.append(info.name)
    return found
