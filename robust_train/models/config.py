"""Models that remember how they were built: `model_config` and `build_model`.

Checkpoints store `{"class_path": ..., "init_args": {...}}` next to the weights (the layout of
LightningCLI / jsonargparse), so a classifier can be rebuilt without the training code or config.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from torch import Tensor, nn

__all__ = ["RecordsConfig", "model_config", "build_model"]

_FLAG = "_rt_recording_init"


class RecordsConfig:
    """Mixin: record the constructor arguments of every instance (defaults included).

    Put it before `nn.Module` in the bases. Subclasses are recorded too: the arguments kept are
    those
    of the outermost `__init__` call. `skip_pretrained_args` lists init args that `build_model(...,
    skip_pretrained=True)` overrides, for models whose constructor would otherwise fetch weights.

    Example:
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
            object.__setattr__(self, "_model_config", {"init_args": recorded})

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

    Example:
        >>> from robust_train.models import SmallCNN
        >>> cfg = model_config(SmallCNN(width=8))
        >>> cfg["class_path"], cfg["init_args"]["width"]
        ('robust_train.models.SmallCNN', 8)
    """
    recorded = getattr(model, "__dict__", {}).get("_model_config")
    if recorded is None:
        raise TypeError(
            f"{type(model).__name__} does not record its constructor arguments; derive it from "
            "robust_train.models.RecordsConfig, or pass a config dict / module to load_classifier"
        )
    init_args = {
        k: _plain(v, f"`{k}` of {type(model).__name__}") for k, v in recorded["init_args"].items()
    }
    return {"class_path": _class_path(type(model)), "init_args": init_args}


def _import(class_path: str) -> Any:
    parts = class_path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            break
        return obj
    raise ImportError(f"cannot import class_path {class_path!r} of the model config")


def build_model(config: Mapping[str, Any], *, skip_pretrained: bool = False) -> nn.Module:
    """Build a model from `{"class_path": "pkg.module.Class", "init_args": {...}}`.

    Args:
        config: the dict written by `model_config` (or a LightningCLI-style model section).
        skip_pretrained: build the architecture only: apply the class's `skip_pretrained_args`
            (used when a state dict will be loaded next, so no weights are downloaded).

    Example:
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
    cls = _import(config["class_path"])
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise TypeError(f"class_path {config['class_path']!r} is not an nn.Module class: {cls!r}")
    args = dict(init_args)
    if skip_pretrained:
        args.update(getattr(cls, "skip_pretrained_args", {}))
    try:
        return cls(**args)
    except TypeError as err:
        raise TypeError(
            f"cannot build {config['class_path']} with init_args {args!r}: {err}"
        ) from err
