"""Load a trained classifier from a `robust-train fit` checkpoint or a plain state dict file.

Checkpoint format (written by RobustClassifier): `checkpoint["state_dict"]` holds the classifier's
parameters under the prefix "model." and `checkpoint["robust_train"]` is
`{"model": model_config(model), "softplus_beta": float | None, "datamodule": {...} | None}`.

Files are read tensors-only (`torch.load(weights_only=True)`: tensors, containers and plain
values, plus the path classes of `SAFE_GLOBALS`), which is what `fit` and `export` write. A file
that holds other Python objects is refused unless the caller opts in (`trusted=True`): unpickling
an object can run any code the file carries, such as a pickled `os.system` call. Likewise the model
class path a checkpoint records is imported only from the installed packages (or a module already
imported); one of the working folder or elsewhere needs `trust_class_path=True`
(`robust_train.core.trust.check_recorded_import`).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import pickle
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.core.resources import resolve_file
from robust_train.core.trust import TRUST_CLASS_PATH
from robust_train.models.config import build_model
from robust_train.models.softplus import softplus

__all__ = [
    "CheckpointError",
    "SAFE_GLOBALS",
    "UntrustedCheckpointError",
    "checkpoint_safe",
    "classifier_from",
    "load_classifier",
    "read_checkpoint",
]

PREFIX = "model."
# Plain value classes that tensors-only loading accepts besides torch's own: rebuilding one only
# makes a path object from strings.
SAFE_GLOBALS: tuple[type, ...] = (
    pathlib.PosixPath,
    pathlib.WindowsPath,
    pathlib.PurePosixPath,
    pathlib.PureWindowsPath,
)
TRUST_PYTHON = "pass trusted=True"


class CheckpointError(RuntimeError, ValueError):
    """A checkpoint file that cannot be read, or whose weights do not fit the model (a user error:
    the console script prints it as one line)."""

    user_error = True  # robust_train.app.cli: one line, exit code 2


class UntrustedCheckpointError(CheckpointError):
    """A file holding Python objects that only full unpickling (which can run code) would load."""


def _first_line(err: BaseException) -> str:
    """The first line of an error, never torch's advice to retry with `weights_only=False`."""
    text = str(err).strip()
    line = text.splitlines()[0] if text else type(err).__name__
    return "not a tensors-only torch file" if "weights_only" in line else line


def _corrupt(file: Path, err: BaseException) -> CheckpointError:
    return CheckpointError(
        f"cannot read {str(file)!r} as a torch checkpoint (corrupt or not a checkpoint): "
        f"{_first_line(err)}"
    )


def _refusal(file: Path, err: BaseException, opt_in: str) -> CheckpointError:
    """The one-line refusal of a file that tensors-only loading rejects (or a corrupt-file error
    when it is neither a torch zip file nor a pickle)."""
    found = re.search(r"GLOBAL ([\w.]+)", str(err))
    if found:
        what = f"the Python object {found.group(1)}"
    else:
        with file.open("rb") as stream:
            magic = stream.read(2)
        if magic != b"PK" and not magic.startswith(b"\x80"):
            return _corrupt(file, ValueError("neither a torch zip file nor a pickle"))
        operand = re.search(r"Unsupported operand \d+", str(err))
        detail = operand.group(0) if operand else "not a torch.save file"
        what = f"pickled data that tensors-only loading rejects ({detail})"
    return UntrustedCheckpointError(
        f"refused to load {str(file)!r}: it holds {what}, and unpickling it runs whatever code "
        f"the file carries; only if you trust who made the file, {opt_in}"
    )


def read_checkpoint(
    path: str | os.PathLike[str],
    map_location: Any = "cpu",
    *,
    trusted: bool = False,
    opt_in: str = TRUST_PYTHON,
) -> Any:
    """`torch.load` a file tensors-only; a file that needs full unpickling only with `trusted`.

    Args:
        path: the file.
        map_location: passed to `torch.load`.
        trusted: also load files holding other Python objects (full unpickling). RISK: unpickling
            runs any code the file carries (a crafted file can call `os.system`); set it only for
            files whose maker you trust. Files written by `robust-train fit` and `export` never
            need it.
        opt_in: how the refusal tells the user to opt in (e.g. "pass --trust-checkpoint").

    Raises:
        FileNotFoundError: no such file.
        UntrustedCheckpointError: (a CheckpointError) the file holds other Python objects and
            `trusted` is False; one line naming the file, what it holds and `opt_in`.
        CheckpointError: the file is corrupt or not a torch file.

    Examples:
        >>> import fractions, tempfile, os
        >>> file = os.path.join(tempfile.mkdtemp(), "x.ckpt")
        >>> torch.save({"w": torch.ones(1), "ratio": fractions.Fraction(1, 3)}, file)
        >>> read_checkpoint(file)
        Traceback (most recent call last):
        ...
        robust_train.models.loading.UntrustedCheckpointError: refused to load ...
        >>> read_checkpoint(file, trusted=True)["ratio"]
        Fraction(1, 3)
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"checkpoint file {str(file)!r} does not exist")
    try:
        with torch.serialization.safe_globals(list(SAFE_GLOBALS)), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Detected pickle protocol", UserWarning)
            return torch.load(file, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        if not trusted:
            raise _refusal(file, err, opt_in) from None
    except Exception as err:
        raise _corrupt(file, err) from err
    try:
        return torch.load(file, map_location=map_location, weights_only=False)
    except Exception as err:
        raise _corrupt(file, err) from err


def checkpoint_safe(value: Any) -> Any:
    """`value` as what tensors-only loading reads back: tensors, None, bool, int, float, str, and
    lists, tuples and str-keyed dicts of them; paths become strings, namespaces and dataclasses
    dicts, anything else its repr (descriptions, not objects).

    Examples:
        >>> from pathlib import Path
        >>> checkpoint_safe({"root": Path("/data"), "fn": len, "sizes": (1, 2)})
        {'root': '/data', 'fn': '<built-in function len>', 'sizes': (1, 2)}
    """
    if value is None or isinstance(value, (bool, int, float, str, Tensor)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(checkpoint_safe(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    elif callable(getattr(value, "as_dict", None)):  # jsonargparse / argparse-like namespaces
        value = value.as_dict()
    elif not isinstance(value, Mapping) and type(value).__name__ == "Namespace":
        value = vars(value)
    if isinstance(value, Mapping):
        return {str(k): checkpoint_safe(v) for k, v in value.items()}
    return repr(value)


def load_classifier(
    path: str | os.PathLike[str],
    model: Mapping[str, Any] | nn.Module | None = None,
    map_location: Any = "cpu",
    *,
    trusted: bool = False,
    opt_in: str = TRUST_PYTHON,
    trust_class_path: bool = False,
) -> nn.Module:
    """Rebuild a classifier from `path` and return it in eval mode.

    Args:
        path: a Lightning `.ckpt` written by `robust-train fit` (it carries the model config), or
            a file saved with `torch.save(model.state_dict(), path)` (keys with or without the
            "model." prefix). A path that does not exist here but names a shipped checkpoint
            (`"mnist5k_robust"`, `"checkpoints/mnist5k_robust.ckpt"`) loads the packaged file
            (`robust_train.core.resources`; one line on stderr says so).
        model: None (use the config stored in the checkpoint), a config dict
            `{"class_path", "init_args"}` to build, or an `nn.Module` to load into (in place).
        map_location: passed to `torch.load`; a device (string or torch.device) also moves the
            model.
        trusted: load a file that holds Python objects beyond tensors and plain values (full
            unpickling). RISK: that runs any code the file carries; only for files whose maker
            you trust (see `read_checkpoint`). Checkpoints of `fit` and `export` never need it.
        opt_in: how a refusal tells the user to opt in.
        trust_class_path: import the model class the checkpoint records even when its module is
            outside the installed packages (the working folder, PYTHONPATH). RISK: importing a
            module runs its code. A class whose module is imported already needs no opt-in.

    Returns:
        The classifier (softplus-swapped when the checkpoint says it was trained that way, and
        `model` is not a module), in eval mode.

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: no model config in the file and `model` is None.
        CheckpointError: (a RuntimeError) the file is unreadable, holds Python objects and
            `trusted` is False (UntrustedCheckpointError), or its state dict does not fit the
            model; names the missing/unexpected keys.

    Examples:
        >>> import tempfile, os
        >>> from robust_train.models import SmallCNN
        >>> net = SmallCNN(width=8)
        >>> file = os.path.join(tempfile.mkdtemp(), "net.pt")
        >>> torch.save(net.state_dict(), file)
        >>> loaded = load_classifier(file, model=net.__class__(width=8))
        >>> x = torch.rand(2, 1, 8, 8)
        >>> bool(torch.equal(loaded(x), net.eval()(x))), loaded.training
        (True, False)
    """
    path = resolve_file(path, "checkpoints", what="checkpoint")
    obj = read_checkpoint(path, map_location, trusted=trusted, opt_in=opt_in)
    return classifier_from(obj, path, model, map_location, trust_class_path=trust_class_path)


def classifier_from(
    obj: Any,
    path: str | os.PathLike[str],
    model: Mapping[str, Any] | nn.Module | None = None,
    map_location: Any = "cpu",
    *,
    trust_class_path: bool = False,
    class_path_opt_in: str = TRUST_CLASS_PATH,
) -> nn.Module:
    """The classifier of an already read checkpoint or state dict `obj` (read from `path`, named
    in errors); the arguments and result are those of `load_classifier` (`class_path_opt_in`:
    how a refused recorded class path tells the user to opt in)."""
    meta: Mapping[str, Any] = {}
    state = obj
    if isinstance(obj, Mapping) and isinstance(obj.get("state_dict"), Mapping):
        state = obj["state_dict"]
        meta = obj.get("robust_train") or {}
    if not isinstance(state, Mapping) or not all(isinstance(k, str) for k in state):
        raise ValueError(
            f"{str(path)!r} holds neither a checkpoint with a 'state_dict' nor a state dict"
        )

    if isinstance(model, nn.Module):
        net = model
    else:
        config = model if model is not None else meta.get("model")
        if config is None:
            kind = f" of its {meta['model_class']}" if meta.get("model_class") else ""
            raise ValueError(
                f"{str(path)!r} holds no model config{kind} (checkpoint['robust_train']['model']: "
                "fit records it for a model built from a config with plain init_args, or of a "
                "class deriving from robust_train.models.RecordsConfig); pass "
                "model=<config dict {'class_path', 'init_args'} or an nn.Module> to load it into"
            )
        where = "the `model` given" if model is not None else f"the model recorded in {path!s}"
        net = build_model(
            config,
            skip_pretrained=True,
            what=where,
            recorded=model is None and not trust_class_path,
            opt_in=class_path_opt_in,
        )
        beta = meta.get("softplus_beta")
        if beta is not None:
            softplus(net, float(beta), inplace=True)
    _load_state(net, dict(state), path)
    if isinstance(map_location, (str, torch.device)):
        net.to(map_location)
    return net.eval()


def _load_state(net: nn.Module, state: dict[str, Any], path: str | os.PathLike[str]) -> None:
    own = net.state_dict()
    state = _match_keys(state, own)
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    mis_shaped = [
        f"{k}: file {tuple(v.shape)} vs model {tuple(own[k].shape)}"
        for k, v in state.items()
        if k in own and isinstance(v, Tensor) and v.shape != own[k].shape
    ]
    if missing or unexpected or mis_shaped:
        raise CheckpointError(
            f"the state dict in {str(path)!r} does not fit {type(net).__name__}: "
            f"missing keys {missing[:10]} ({len(missing)}), unexpected keys {unexpected[:10]} "
            f"({len(unexpected)}), shape mismatches {mis_shaped[:10]}"
        )
    net.load_state_dict(state, strict=True)


def _match_keys(state: dict[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """Use the keys as they are when they fit; else keep the "model."-prefixed ones, stripped."""
    if set(state) == set(own):
        return state
    stripped = {k[len(PREFIX) :]: v for k, v in state.items() if k.startswith(PREFIX)}
    return stripped if stripped else state
