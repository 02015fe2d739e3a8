"""The trust policy for class paths: which classes a file the user was handed may import.

Checkpoints and configs name classes by dotted path (`{"class_path": "pkg.mod.Class", ...}`).
Importing a module runs its code, so a class path read from a file the user was handed (a
checkpoint) is resolved with `recorded=True`: its top-level package must be on a short allow-list
(`RECORDED_PACKAGES`: robust_train, torch, torchvision; a data module: robust_train only,
`DATA_PACKAGES`) and installed outside the working folder, and no part of the path may be
`__main__` or `__init__` (a program's entry point: `PIL.__main__` prints a report, other
packages' parse the command line). A module of the working folder, of a folder on PYTHONPATH, of
any other installed package or of the standard library is refused (`UntrustedClassPathError`,
naming the class path, why and the opt-in) before it is imported, unless the caller opts in. A
class path the user wrote (a config given on the command line, `--model`) is the user's choice:
it may name a module of the working folder. Every class path is type-checked (`resolve_class`)
before anything it names is called.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import json
import os
import site
import sys
import urllib.parse
from pathlib import Path
from typing import Any

__all__ = [
    "DATA_PACKAGES",
    "RECORDED_PACKAGES",
    "TRUST_CLASS_PATH",
    "ClassPathError",
    "ClassPathNotFound",
    "UntrustedClassPathError",
    "check_recorded_import",
    "class_path_of",
    "import_class_path",
    "resolve_class",
]

TRUST_CLASS_PATH = "pass trust_class_path=True"
# The top-level packages a class path recorded in a handed checkpoint may name without opt-in
# (models); a recorded data module may only be the package's own (`DATA_PACKAGES`).
RECORDED_PACKAGES = ("robust_train", "torch", "torchvision")
DATA_PACKAGES = ("robust_train",)
# Module names whose import runs a program rather than defining classes.
ENTRY_MODULES = ("__main__", "__init__")


class ClassPathError(ImportError, TypeError):
    """A class path that cannot be imported, or names something other than the class expected (a
    user error: the console script prints it as one line, exit code 2)."""

    user_error = True


class ClassPathNotFound(ClassPathError):
    """A class path whose module or attribute cannot be imported."""


class UntrustedClassPathError(ClassPathError):
    """A recorded class path whose module lies outside the installed packages (the working
    folder, PYTHONPATH, any other file): it is not imported unless the user opts in."""


@functools.lru_cache(maxsize=1)
def _installed_top_level() -> dict[str, tuple[str, ...]]:
    return {k: tuple(v) for k, v in importlib.metadata.packages_distributions().items()}


def _install_roots(top: str) -> list[Path]:
    """Where installed packages live: the site-packages folders of this interpreter (and those
    on sys.path, such as a borrowed environment's), and the project folder of an editable install
    of a distribution that provides `top`."""
    folders = [*getattr(site, "getsitepackages", list)(), site.getusersitepackages(), *sys.path]
    roots = {
        Path(f).resolve()
        for f in folders
        if f and Path(f).name in ("site-packages", "dist-packages")
    }
    for name in _installed_top_level().get(top, ()):
        try:
            text = importlib.metadata.distribution(name).read_text("direct_url.json") or "{}"
            info = json.loads(text)
        except (importlib.metadata.PackageNotFoundError, ValueError, OSError):
            continue
        url = str(info.get("url", ""))
        if (info.get("dir_info") or {}).get("editable") and url.startswith("file://"):
            roots.add(Path(urllib.parse.unquote(urllib.parse.urlparse(url).path)).resolve())
    return sorted(roots)


def _locations(spec: Any) -> list[Path]:
    found = [spec.origin] if spec.origin not in (None, "built-in", "frozen") else []
    found += list(spec.submodule_search_locations or [])
    return [Path(f).resolve() for f in found]


def _refused(class_path: str, what: str, why: str, opt_in: str) -> UntrustedClassPathError:
    return UntrustedClassPathError(
        f"refused class_path {class_path!r} ({what}): {why}, and importing it runs its code; "
        f"only if you trust it, {opt_in}"
    )


def check_recorded_import(
    class_path: str,
    what: str,
    opt_in: str = TRUST_CLASS_PATH,
    packages: tuple[str, ...] = RECORDED_PACKAGES,
) -> None:
    """Refuse, before importing anything, a recorded class path that names a `__main__` (or
    `__init__`) module anywhere in its dotted path, or whose top-level package is not one of
    `packages` (the allow-list), or whose package is found somewhere other than where installed
    packages live (site-packages, or the project folder of an editable install).

    A module of the working folder, a folder on PYTHONPATH, a file named like an allowed package
    that shadows it, an installed package outside the allow-list (whose submodules may run a
    command-line parser at import) and the standard library are all refused: importing runs
    module code, and no model or data class of a checkpoint lives there.

    Args:
        class_path: the dotted path, e.g. "evilmod.Net".
        what: where it was recorded, for the error (e.g. "the model recorded in 'x.ckpt'").
        opt_in: how the user opts in (e.g. "pass --trust-class-path").
        packages: the top-level packages a recorded class path may name without opt-in.

    Raises:
        UntrustedClassPathError: one line naming the class path, why it is refused and opt_in.

    Examples:
        >>> check_recorded_import("torch.nn.Linear", "a test")  # on the allow-list
        >>> check_recorded_import("PIL.__main__.Image", "a test")
        Traceback (most recent call last):
        ...
        robust_train.core.trust.UntrustedClassPathError: refused class_path 'PIL.__main__...
    """
    parts = class_path.split(".")
    entry = [p for p in parts[:-1] if p in ENTRY_MODULES]
    if entry:
        module = ".".join(parts[: parts.index(entry[0]) + 1])
        why = f"its module {module!r} is a program's entry point (`{entry[0]}`)"
        raise _refused(class_path, what, why, opt_in)
    top = parts[0]
    allowed = top in packages
    if allowed and top in sys.modules:
        return  # the package itself is imported already (the real one, not a shadow)
    try:
        spec = importlib.util.find_spec(top) if top else None  # finds the file; runs nothing
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return  # the import fails as "cannot import" (ClassPathNotFound); nothing runs
    places = _locations(spec) if spec is not None else []
    if allowed and top in _installed_top_level():
        roots = _install_roots(top)
        if places and all(any(r in p.parents for r in roots) for p in places):
            return
    cwd = Path.cwd().resolve()
    in_cwd = [p for p in places if p.parent == cwd or p == cwd / top]
    if in_cwd:
        where = f"in the working folder ({in_cwd[0]})"
    elif allowed or top not in _installed_top_level():
        where = f"outside the installed packages ({places[0] if places else top})"
    else:
        where = f"not one of the packages a checkpoint may name ({', '.join(packages)})"
    raise _refused(class_path, what, f"its module {top!r} is {where}", opt_in)


def class_path_of(cls: type) -> str:
    """Dotted path of `cls`, shortened to the highest package that exports the same object."""
    module = cls.__module__
    while "." in module:
        parent = module.rsplit(".", 1)[0]
        if getattr(sys.modules.get(parent), cls.__qualname__, None) is not cls:
            break
        module = parent
    return f"{module}.{cls.__qualname__}"


def import_class_path(class_path: str, what: str) -> Any:
    parts = class_path.split(".")
    missing: ModuleNotFoundError | None = None
    for cut in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:cut])
        try:
            obj: Any = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name and not name.startswith(err.name):
                raise ClassPathNotFound(
                    f"cannot import class_path {class_path!r} ({what}): its module {name!r} "
                    f"fails to import: {err}"
                ) from err
            missing = missing or err
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            break
        return obj
    reason = f"{missing}; put the folder that holds it on PYTHONPATH" if missing else "no such name"
    raise ClassPathNotFound(f"cannot import class_path {class_path!r} ({what}): {reason}")


def _import_user(class_path: str, what: str) -> Any:
    """`import_class_path`, then (a module the installed packages lack) again with the working
    folder at the end of sys.path, as `python -m` would find it: a user's own `mynet.Net`."""
    try:
        return import_class_path(class_path, what)
    except ClassPathNotFound:
        cwd = os.getcwd()
        if cwd in sys.path or "" in sys.path:
            raise
        sys.path.append(cwd)  # last: it never shadows an installed package
        return import_class_path(class_path, what)


def resolve_class(
    class_path: Any,
    base: type,
    what: str,
    *,
    recorded: bool = False,
    opt_in: str = TRUST_CLASS_PATH,
    packages: tuple[str, ...] = RECORDED_PACKAGES,
) -> type:
    """The class `class_path` names, checked to be `base` or a subclass of it before anything is
    called (a path read from a checkpoint may name any callable, such as `subprocess.Popen`).

    Args:
        class_path: a dotted path "pkg.module.Class".
        base: the class it must be (e.g. `nn.Module`, `LightningDataModule`).
        what: where the path came from, for the error (e.g. "the model recorded in x.ckpt").
        recorded: the path was read from a file the user was handed: its module is imported only
            if its package is one of `packages`, installed outside the working folder, and no
            part of the path is `__main__` (`check_recorded_import`). Otherwise (a path the
            user wrote) a module the installed packages lack is also looked for in the working
            folder.
        opt_in: how a refusal of a recorded path tells the user to opt in.
        packages: the allow-list of top-level packages for a recorded path.

    Raises:
        ClassPathError: (an ImportError and TypeError) it is not a subclass of `base`, or
            (ClassPathNotFound) cannot be imported, or (UntrustedClassPathError) a recorded path
            whose module is outside the installed packages; one line naming the path and `what`.

    Examples:
        >>> import torch
        >>> resolve_class("torch.nn.Linear", torch.nn.Module, "a test").__name__
        'Linear'
        >>> resolve_class("subprocess.Popen", torch.nn.Module, "a test")
        Traceback (most recent call last):
        ...
        robust_train.core.trust.ClassPathError: class_path 'subprocess.Popen' (a test) ...
    """
    if not isinstance(class_path, str) or not class_path.strip():
        raise ClassPathError(f"class_path of {what} must be a dotted path, got {class_path!r}")
    if recorded:
        check_recorded_import(class_path, what, opt_in, packages)
        try:
            cls = import_class_path(class_path, what)
        except ClassPathNotFound as err:
            raise ClassPathNotFound(
                f"{err}; a module outside {', '.join(packages)} is imported only if you trust "
                f"it: {opt_in}"
            ) from None
    else:
        cls = _import_user(class_path, what)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ClassPathError(
            f"class_path {class_path!r} ({what}) is not a {class_path_of(base)} subclass but "
            f"{cls!r}; refused before calling it"
        )
    return cls
