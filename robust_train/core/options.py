"""Option sets defined once: a frozen dataclass is the one source of a set of options.

A function or class that takes an option set declares `**options` and is decorated with
`takes_options(OptionsClass)`: its signature (what `help()`, IDEs, jsonargparse/LightningCLI and
`inspect.signature` see) then lists every option as a keyword-only parameter with the dataclass's
default, and `build_options` turns the keywords given into the checked dataclass. Adding an option
is one edit: a field of the dataclass (`option(default, help, check=...)`: the help is what the
command line shows, the check what `check_options` runs on its value).

Examples:
    >>> from dataclasses import dataclass, field
    >>> @dataclass(frozen=True)
    ... class Steps:
    ...     n_steps: int = field(default=3, metadata={"help": "iterations"})
    >>> @takes_options(Steps)
    ... def run(x, **options):
    ...     return build_options(Steps, options, where="run").n_steps * x
    >>> run(2, n_steps=4), str(inspect.signature(run))
    (8, "(x, *, n_steps: 'int' = 3)")
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = [
    "build_options",
    "check_options",
    "option",
    "option_names",
    "split_options",
    "takes_options",
]

T = TypeVar("T")
C = TypeVar("C", bound=Callable[..., Any])


def option(
    default: Any = dataclasses.MISSING,
    help_text: str | None = None,
    *,
    check: Callable[[Any, str], object] | None = None,
) -> Any:
    """A field of an option set: its `default` (none given: the option is required), the `help`
    the command line shows for it and the `check` its value passes (`check(value, name)`,
    raising a ValueError that names the field), run by `check_options`.

    Examples:
        >>> from dataclasses import dataclass, fields
        >>> from robust_train.core.validation import check_positive
        >>> @dataclass(frozen=True)
        ... class Steps:
        ...     n_steps: int = option(3, "iterations", check=check_positive)
        ...     def __post_init__(self) -> None:
        ...         check_options(self)
        >>> Steps().n_steps, fields(Steps)[0].metadata["help"]
        (3, 'iterations')
        >>> Steps(n_steps=0)
        Traceback (most recent call last):
        ...
        ValueError: `n_steps` must be > 0, got 0
    """
    metadata: dict[str, Any] = {}
    if help_text is not None:
        metadata["help"] = help_text
    if check is not None:
        metadata["check"] = check
    return dataclasses.field(default=default, metadata=metadata)


def check_options(options: Any) -> None:
    """Run the `check` each field of the dataclass instance `options` declares (`option`), in
    field order, on its value and name; an option set calls it from `__post_init__`.

    Raises:
        ValueError, TypeError: what the first failing check raises, naming the field.
    """
    for f in dataclasses.fields(options):
        check = f.metadata.get("check")
        if check is not None:
            check(getattr(options, f.name), f.name)


def option_names(options_cls: type) -> tuple[str, ...]:
    """The option names of a dataclass, in field order.

    Examples:
        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class O:
        ...     a: int = 1
        >>> option_names(O)
        ('a',)
    """
    return tuple(f.name for f in option_fields(options_cls))


def split_options(
    given: Mapping[str, Any], options_cls: type
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The keywords of `given` that name options of `options_cls`, and the others: for a
    callable that takes two option sets (`takes_options` on each) through one `**options`.

    Examples:
        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class O:
        ...     a: int = 1
        >>> split_options({"a": 2, "b": 3}, O)
        ({'a': 2}, {'b': 3})
    """
    names = set(option_names(options_cls))
    mine = {k: v for k, v in given.items() if k in names}
    return mine, {k: v for k, v in given.items() if k not in names}


def option_fields(options_cls: type) -> tuple[dataclasses.Field[Any], ...]:
    """The fields an option set's constructor takes: its own `option_fields()` where it holds
    another option set (composition, e.g. `EvaluationSettings` holds `AttackOptions`), else its
    dataclass fields that `__init__` takes."""
    own = getattr(options_cls, "option_fields", None)
    if callable(own):
        return tuple(own())
    return tuple(f for f in dataclasses.fields(options_cls) if f.init)


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return inspect.Parameter.empty


def takes_options(
    options_cls: type,
    *,
    defaults: Mapping[str, Any] | None = None,
    exclude: tuple[str, ...] = (),
    also: Callable[..., Any] | None = None,
) -> Callable[[C], C]:
    """Decorator: the function (or class, whose `__init__` is used) takes the fields of
    `options_cls` as keyword-only parameters through its `**options`.

    Args:
        options_cls: the dataclass of the options.
        defaults: defaults that differ from the dataclass's (a preset, e.g. a cheaper monitor).
        exclude: fields the decorated callable does not take (it sets them itself).
        also: a callable (e.g. the base class's `__init__`) whose keyword parameters the
            decorated one passes on through `**options` too; they are listed before the options.
    """
    overrides = dict(defaults or {})

    def decorate(target: C) -> C:
        fn: Any = target
        if isinstance(target, type):
            if "__init__" not in vars(target):  # inherited: give the class its own signature
                target.__init__ = _forwarding_init(target)  # type: ignore[misc]
            fn = target.__init__  # type: ignore[misc]
        signature = inspect.signature(fn)
        params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
        taken = {p.name for p in params}
        if also is not None:
            for p in inspect.signature(also).parameters.values():
                if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in taken:
                    if p.name != "self":
                        params.append(p.replace(kind=p.KEYWORD_ONLY))
                        taken.add(p.name)
        for f in option_fields(options_cls):
            if not f.init or f.name in taken or f.name in exclude:
                continue
            default = overrides.get(f.name, _default(f))
            params.append(
                inspect.Parameter(
                    f.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=f.type
                )
            )
        fn.__signature__ = signature.replace(parameters=params)
        fn.__options__ = (options_cls, overrides)
        return target

    return decorate


def _forwarding_init(cls: type) -> Callable[..., None]:
    """An `__init__` for `cls` that calls the inherited one, so that decorating a subclass never
    rewrites its base class's signature (IGSumNorm adds `beta` to its own options only)."""
    inherited = super(cls, cls).__init__  # type: ignore[misc, arg-type]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        inherited(self, *args, **kwargs)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__doc__ = inherited.__doc__
    __init__.__signature__ = inspect.signature(inherited)  # type: ignore[attr-defined]
    return __init__


def build_options(
    options_cls: type[T],
    given: Mapping[str, Any],
    *,
    where: str,
    defaults: Mapping[str, Any] | None = None,
    base: T | None = None,
) -> T:
    """The option set from the keywords `given` (over `base`, else `defaults`, else the
    dataclass's defaults); an unknown keyword raises a TypeError naming `where`, the closest
    option and the valid ones.

    Examples:
        >>> from dataclasses import dataclass
        >>> @dataclass(frozen=True)
        ... class O:
        ...     n_steps: int = 3
        >>> build_options(O, {"n_step": 2}, where="f")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: f got an unknown option 'n_step' (did you mean 'n_steps'?); ...
    """
    names = option_names(options_cls)
    for key in given:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(
                f"{where} got an unknown option {key!r}{hint}; its options are {list(names)}"
            )
    if base is not None:  # checked already: passed on as it is when nothing changes
        return dataclasses.replace(base, **given) if given else base  # type: ignore[type-var]
    chosen = {**dict(defaults or {}), **given}
    for f in option_fields(options_cls):
        if _default(f) is inspect.Parameter.empty and f.name not in chosen:
            raise TypeError(f"{where} missing required keyword argument {f.name!r}")
    return options_cls(**chosen)
