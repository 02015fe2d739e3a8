"""Load a trained classifier from a `robust-train fit` checkpoint or a plain state dict file.

Checkpoint format (written by RobustClassifier): `checkpoint["state_dict"]` holds the classifier's
parameters under the prefix "model." and `checkpoint["robust_train"]` is
`{"model": model_config(model), "softplus_beta": float | None, "datamodule": {...} | None}`.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from robust_train.models.config import build_model
from robust_train.models.softplus import softplus

__all__ = ["CheckpointError", "load_classifier", "read_checkpoint"]

PREFIX = "model."


class CheckpointError(RuntimeError, ValueError):
    """A checkpoint file that cannot be read, or whose weights do not fit the model (a user error:
    the console script prints it as one line)."""

    user_error = True  # robust_train.cli: one line, exit code 2


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def read_checkpoint(path: str | os.PathLike[str], map_location: Any = "cpu") -> Any:
    """`torch.load` a file: tensors-only first; full unpickling for Lightning checkpoints whose
    hyper-parameters hold Python objects (only load files you trust)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"checkpoint file {str(file)!r} does not exist")
    try:
        return torch.load(file, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        pass  # Python objects inside: retry with full unpickling below
    except Exception as err:
        raise CheckpointError(
            f"cannot read {str(file)!r} as a torch checkpoint (corrupt or not a "
            f"checkpoint): {_first_line(err)}"
        ) from err
    try:
        return torch.load(file, map_location=map_location, weights_only=False)
    except Exception as err:
        raise CheckpointError(
            f"cannot read {str(file)!r} as a torch checkpoint (corrupt or not a "
            f"checkpoint): {_first_line(err)}"
        ) from err


def load_classifier(
    path: str | os.PathLike[str],
    model: Mapping[str, Any] | nn.Module | None = None,
    map_location: Any = "cpu",
) -> nn.Module:
    """Rebuild a classifier from `path` and return it in eval mode.

    Args:
        path: a Lightning `.ckpt` written by `robust-train fit` (it carries the model config), or
            a file saved with `torch.save(model.state_dict(), path)` (keys with or without the
            "model." prefix).
        model: None (use the config stored in the checkpoint), a config dict
            `{"class_path", "init_args"}` to build, or an `nn.Module` to load into (in place).
        map_location: passed to `torch.load`; a device (string or torch.device) also moves the
            model.

    Returns:
        The classifier (softplus-swapped when the checkpoint says it was trained that way, and
        `model` is not a module), in eval mode.

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: no model config in the file and `model` is None.
        CheckpointError: (a RuntimeError) the file is unreadable, or its state dict does not fit
            the model; names the missing/unexpected keys.

    Example:
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
    obj = read_checkpoint(path, map_location)
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
            raise ValueError(
                f"{str(path)!r} holds no model config (checkpoint['robust_train']['model']); pass "
                "model=<config dict {'class_path', 'init_args'} or an nn.Module> to load it into"
            )
        net = build_model(config, skip_pretrained=True)
        beta = meta.get("softplus_beta")
        if beta is not None:
            softplus(net, float(beta), inplace=True)

    own = net.state_dict()
    state = _match_keys(dict(state), own)
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
    if isinstance(map_location, (str, torch.device)):
        net.to(map_location)
    return net.eval()


def _match_keys(state: dict[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """Use the keys as they are when they fit; else keep the "model."-prefixed ones, stripped."""
    if set(state) == set(own):
        return state
    stripped = {k[len(PREFIX) :]: v for k, v in state.items() if k.startswith(PREFIX)}
    return stripped if stripped else state
