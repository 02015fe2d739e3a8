"""Resolve and fetch torchvision pretrained weights, with a clear error when offline.

torchvision downloads weights into `<torch.hub.get_dir()>/checkpoints/<file name of the URL>`
(`$TORCH_HOME/hub/checkpoints`, default `~/.cache/torch/hub/checkpoints`). Without network the
download fails; the error raised here names that folder and file and the two ways to provide it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
import torchvision
from torch import Tensor

from robust_train.models.loading import read_checkpoint

__all__ = [
    "PretrainedWeightsError",
    "resolve_weights",
    "hub_checkpoint_path",
    "fetch_state_dict",
    "load_state_dict_file",
]


class PretrainedWeightsError(RuntimeError):
    """Pretrained weights that cannot be had (offline, unreadable cache): a user error, printed by
    the console script as its one line (exit code 2)."""

    user_error = True


def resolve_weights(name: str, weights: str | None) -> Any:
    """The torchvision weights enum member for `weights` ("DEFAULT", "IMAGENET1K_V1", or a full
    "ResNet18_Weights.IMAGENET1K_V1"), or None.

    Examples:
        >>> resolve_weights("resnet18", "DEFAULT")
        ResNet18_Weights.IMAGENET1K_V1
    """
    if weights is None:
        return None
    if not isinstance(weights, str):
        raise TypeError(f"`weights` must be None or a string such as 'DEFAULT', got {weights!r}")
    enum = torchvision.models.get_model_weights(name)
    key = weights.split(".", 1)[1] if weights.startswith(enum.__name__ + ".") else weights
    try:
        return enum[key]
    except KeyError:
        options = ["DEFAULT", *enum.__members__]
        raise ValueError(
            f"Unknown `weights` {weights!r} for {name!r}; expected None or one of {options}"
        ) from None


def hub_checkpoint_path(weights: Any) -> Path:
    """Where torchvision keeps (and looks for) the file of a weights enum member."""
    file_name = os.path.basename(urlparse(weights.url).path)
    return Path(torch.hub.get_dir()) / "checkpoints" / file_name


def load_state_dict_file(
    path: str | os.PathLike[str], *, trusted: bool = False
) -> dict[str, Tensor]:
    """Load a state dict saved with `torch.save(model.state_dict(), path)`, tensors-only unless
    `trusted` (full unpickling; RISK: runs any code the file carries, see `read_checkpoint`)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"state dict file {str(file)!r} does not exist")
    state = read_checkpoint(file, trusted=trusted, opt_in="set `trust_weights_path: true`")
    if isinstance(state, Mapping) and isinstance(state.get("state_dict"), Mapping):
        state = state["state_dict"]
    if not isinstance(state, Mapping) or not all(isinstance(v, Tensor) for v in state.values()):
        raise ValueError(
            f"{str(file)!r} does not hold a state dict (a mapping of names to tensors)"
        )
    return dict(state)


def fetch_state_dict(weights: Any, name: str) -> dict[str, Tensor]:
    """The state dict of a torchvision weights enum member: from the hub cache, else downloaded.

    Raises:
        RuntimeError: the file is not cached and cannot be downloaded (e.g. offline); the message
            names the folder and file torchvision looked for and how to provide it.
    """
    target = hub_checkpoint_path(weights)
    if target.is_file():
        try:
            return load_state_dict_file(target)
        except Exception as err:
            raise PretrainedWeightsError(
                f"Cannot read the cached weights {target} for {name!r} ({weights!r}): {err}. "
                "Delete the file to download it again, or pass weights_path=<a state_dict file>."
            ) from err
    try:
        return dict(weights.get_state_dict(progress=False, check_hash=True))
    except Exception as err:
        raise PretrainedWeightsError(
            f"Could not get the pretrained weights {weights!r} for torchvision model {name!r}: "
            f"torchvision looked for the file {target.name!r} in the hub checkpoints folder "
            f"{str(target.parent)!r} (TORCH_HOME={os.environ.get('TORCH_HOME', '<unset>')}) and "
            f"downloading {weights.url} failed ({type(err).__name__}: {err}). To provide the file "
            f"offline, download it elsewhere and place it at {str(target)!r}, or pass "
            "weights_path=<path to the state_dict file> (or weights=None for random weights)."
        ) from err
