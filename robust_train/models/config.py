"""Models that remember how they were built: `model_config` and `build_model`.

Checkpoints store `{"class_path": ..., "init_args": {...}}` next to the weights (the layout of
LightningCLI / jsonargparse), so a classifier can be rebuilt without the training code or config.
A model class records its constructor arguments itself when it derives from `RecordsConfig`;
`robust-train fit` records any other model's from the config that built it (`record_config`).
Class paths read from a file are resolved and type-checked (`resolve_class`) before anything in
them is called.

A class path recorded in a file you were handed (a checkpoint) is resolved with `recorded=True`:
importing a module runs its code, so its top-level package must be on a short allow-list
(`RECORDED_PACKAGES`: robust_train, torch, torchvision; a data module: robust_train only) and
installed outside the working folder, and no part of the path may be `__main__` or `__init__` (a
program's entry point: `PIL.__main__` prints a report, other packages' parse the command line). A
module of the working folder, of a folder on PYTHONPATH, of any other installed package or of the
standard library is refused (`UntrustedClassPathError`, naming the class path, why and the
opt-in) before it is imported, unless the caller opts in. A class path the user wrote (a config
given on the command line, `--model`) is the user's choice: it may name a module of the working
folder.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import site
import sys
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from torch import Tensor, nn

__all__ = [
    "DATA_PACKAGES",
    "RECORDED_PACKAGES",
    "TRUST_CLASS_PATH",
    "ClassPathError",
    "ClassPathNotFound",
    "RecordsConfig",
    "UntrustedClassPathError",
    "check_recorded_import",
    "build_model",
    "model_config",
    "record_config",
    "resolve_class",
]

_FLAG = "_rt_recording_init"
_RECORD = "_model_config"
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
        robust_train.models.config.UntrustedClassPathError: refused class_path 'PIL.__main__...
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


class RecordsConfig:
    """Mixin: record the constructor arguments of every instance (defaults included).

    Put it before `nn.Module` in the bases. Subclasses are recorded too: the arguments kept are
    those
    of the outermost `__init__` call. `skip_pretrained_args` lists init args that `build_model(...,
    skip_pretrained=True)` overrides, for models whose constructor would otherwise fetch weights.

    Examples:
        >>> class Tiny(RecordsConfig, nn.Module):
        ...     def __init__(self, width: int = 4):
        ...         super().__init__()
        ...         self.fc = nn.Linear(2, width)
        >>> Tiny(width=3)._model_config["init_args"]
        {'width': 3}
    """

    skip_pretrained_args: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _recording(cls.__init__)  # type: ignore[method-assign]


def _recording(init: Callable[..., None]) -> Callable[..., None]:
    sig = inspect.signature(init)

    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        outermost = _FLAG not in self.__dict__
        if outermost:
            bound = sig.bind(self, *args, **kwargs)
            bound.apply_defaults()
            object.__setattr__(self, _FLAG, True)
        try:
            init(self, *args, **kwargs)
        finally:
            if outermost:
                del self.__dict__[_FLAG]
        if outermost:
            recorded: dict[str, Any] = {}
            for name, value in list(bound.arguments.items())[1:]:
                kind = sig.parameters[name].kind
                if kind is inspect.Parameter.VAR_KEYWORD:
                    recorded.update(value)
                elif kind is inspect.Parameter.VAR_POSITIONAL:
                    if value:
                        raise TypeError(
                            f"{type(self).__name__} records its config by name: do not pass *{name}"
                        )
                else:
                    recorded[name] = value
            object.__setattr__(self, _RECORD, {"init_args": recorded})

    return wrapper


def _class_path(cls: type) -> str:
    """Dotted path of `cls`, shortened to the highest package that exports the same object."""
    module = cls.__module__
    while "." in module:
        parent = module.rsplit(".", 1)[0]
        if getattr(sys.modules.get(parent), cls.__qualname__, None) is not cls:
            break
        module = parent
    return f"{module}.{cls.__qualname__}"


def _plain(value: Any, where: str) -> Any:
    """Convert to plain, picklable-with-weights_only values (tuples become lists)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Tensor):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        return {str(k): _plain(v, f"{where}[{k!r}]") for k, v in value.items()}
    raise TypeError(
        f"init arg {where} is a {type(value).__name__} ({value!r}); a model config holds only "
        "None, bool, int, float, str, lists and dicts of them"
    )


def model_config(model: nn.Module) -> dict[str, Any]:
    """`{"class_path": ..., "init_args": {...}}` that `build_model` turns back into `model`'s class.

    Args:
        model: an instance of a class using `RecordsConfig` (every model in `robust_train.models`;
            a `softplus` copy keeps its original's config).

    Examples:
        >>> from robust_train.models import SmallCNN
        >>> cfg = model_config(SmallCNN(width=8))
        >>> cfg["class_path"], cfg["init_args"]["width"]
        ('robust_train.models.SmallCNN', 8)
    """
    recorded = getattr(model, "__dict__", {}).get(_RECORD)
    if recorded is None:
        raise TypeError(
            f"{type(model).__name__} does not record its constructor arguments; derive it from "
            "robust_train.models.RecordsConfig, or pass a config dict / module to load_classifier"
        )
    init_args = {
        k: _plain(v, f"`{k}` of {type(model).__name__}") for k, v in recorded["init_args"].items()
    }
    return {"class_path": _class_path(type(model)), "init_args": init_args}


def _import(class_path: str, what: str) -> Any:
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
    """`_import`, then (a module the installed packages lack) again with the working folder at
    the end of sys.path, as `python -m` would find it: a user's own `mynet.Net`."""
    try:
        return _import(class_path, what)
    except ClassPathNotFound:
        cwd = os.getcwd()
        if cwd in sys.path or "" in sys.path:
            raise
        sys.path.append(cwd)  # last: it never shadows an installed package
        return _import(class_path, what)


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
        >>> resolve_class("torch.nn.Linear", nn.Module, "a test").__name__
        'Linear'
        >>> resolve_class("subprocess.Popen", nn.Module, "a test")
        Traceback (most recent call last):
        ...
        robust_train.models.config.ClassPathError: class_path 'subprocess.Popen' (a test) ...
    """
    if not isinstance(class_path, str) or not class_path.strip():
        raise ClassPathError(f"class_path of {what} must be a dotted path, got {class_path!r}")
    if recorded:
        check_recorded_import(class_path, what, opt_in, packages)
        try:
            cls = _import(class_path, what)
        except ClassPathNotFound as err:
            raise ClassPathNotFound(
                f"{err}; a module outside {', '.join(packages)} is imported only if you trust "
                f"it: {opt_in}"
            ) from None
    else:
        cls = _import_user(class_path, what)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ClassPathError(
            f"class_path {class_path!r} ({what}) is not a {_class_path(base)} subclass but "
            f"{cls!r}; refused before calling it"
        )
    return cls


def record_config(model: Any, spec: Any) -> bool:
    """Record on `model` the init_args of the config section `spec` (`{"class_path",
    "init_args"}`, a dict or a jsonargparse Namespace) that built it, so that `model_config` and
    the checkpoints of `robust-train fit` hold them, for a model class that does not derive from
    `RecordsConfig`. Nothing is recorded (False) when the model records its own, when `spec`
    names another class, or when the init_args are not plain values (nested class specs
    included).

    Examples:
        >>> net = nn.Linear(2, 3)
        >>> record_config(net, {"class_path": "torch.nn.Linear",
        ...                     "init_args": {"in_features": 2, "out_features": 3}})
        True
        >>> model_config(net)
        {'class_path': 'torch.nn.Linear', 'init_args': {'in_features': 2, 'out_features': 3}}
    """
    if not isinstance(model, nn.Module) or _RECORD in model.__dict__:
        return False
    as_dict = getattr(spec, "as_dict", None)
    spec = as_dict() if callable(as_dict) else spec
    if not isinstance(spec, Mapping) or not isinstance(spec.get("class_path"), str):
        return False
    init_args = spec.get("init_args") or {}
    try:
        if _import(spec["class_path"], "the model") is not type(model):
            return False
        plain = {k: _plain(v, f"`{k}`") for k, v in dict(init_args).items()}
    except (ImportError, TypeError, ValueError):
        return False
    if _has_class_spec(plain):
        return False
    object.__setattr__(model, _RECORD, {"init_args": plain})
    return True


def _has_class_spec(value: Any) -> bool:
    if isinstance(value, Mapping):
        return "class_path" in value or any(_has_class_spec(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_class_spec(v) for v in value)
    return False


def build_model(
    config: Mapping[str, Any],
    *,
    skip_pretrained: bool = False,
    what: str = "the model config",
    recorded: bool = False,
    opt_in: str = TRUST_CLASS_PATH,
) -> nn.Module:
    """Build a model from `{"class_path": "pkg.module.Class", "init_args": {...}}`.

    Args:
        config: the dict written by `model_config` (or a LightningCLI-style model section).
        skip_pretrained: build the architecture only: apply the class's `skip_pretrained_args`
            (used when a state dict will be loaded next, so no weights are downloaded).
        what: where the config came from, named in a class-path error.
        recorded: the config was read from a file the user was handed (see `resolve_class`).
        opt_in: how a refusal of a recorded class path tells the user to opt in.

    Examples:
        >>> net = build_model(
        ...     {"class_path": "robust_train.models.SmallCNN", "init_args": {"width": 8}}
        ... )
        >>> type(net).__name__
        'SmallCNN'
    """
    if not isinstance(config, Mapping) or not isinstance(config.get("class_path"), str):
        raise ValueError(f"`config` must be a dict with a string 'class_path', got {config!r}")
    init_args = config.get("init_args") or {}
    if not isinstance(init_args, Mapping):
        raise ValueError(f"`config['init_args']` must be a dict, got {init_args!r}")
    cls = resolve_class(config["class_path"], nn.Module, what, recorded=recorded, opt_in=opt_in)
    args = dict(init_args)
    if skip_pretrained:
        args.update(getattr(cls, "skip_pretrained_args", {}))
    try:
        return cls(**args)
    except TypeError as err:
        raise TypeError(
            f"cannot build {config['class_path']} with init_args {args!r}: {err}"
        ) from err
