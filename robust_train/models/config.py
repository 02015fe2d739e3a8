"""Models that remember how they were built: `model_config` and `build_model`.

Checkpoints store `{"class_path": ..., "init_args": {...}}` next to the weights (the layout of
LightningCLI / jsonargparse), so a classifier can be rebuilt without the training code or config.
A model class records its constructor arguments itself when it derives from `RecordsConfig`;
`robust-train fit` records any other model's from the config that built it (`record_config`).
Class paths read from a file are resolved and type-checked (`resolve_class`) before anything in
them is called.

Which class paths a file the user was handed may import (the trust policy: `resolve_class`,
`check_recorded_import`, `UntrustedClassPathError`, ...) is `robust_train.core.trust`'s.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from torch import Tensor, nn

from robust_train.core.trust import (
    TRUST_CLASS_PATH,
    class_path_of,
    import_class_path,
    resolve_class,
)

__all__ = ["RecordsConfig", "build_model", "model_config", "record_config"]

_FLAG = "_rt_recording_init"
_RECORD = "_model_config"


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
    return {"class_path": class_path_of(type(model)), "init_args": init_args}


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
        if import_class_path(spec["class_path"], "the model") is not type(model):
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
