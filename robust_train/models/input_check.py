"""Does a classifier fit a dataset? One probe forward before any work.

`check_model_fits_data(model, datamodule)` compares the channels and image size the model states
(its recorded `in_channels` / `input_size` / `image_size` init args) with those the data module
declares, then runs the model on ONE image of the data's shape and compares its number of outputs
with the data's number of classes. A mismatch is a `DataMismatchError` naming both sides (the
console script prints it as one line and exits with 2), so a 3-class model on 10-class data, or a
28x28 model on 8x8 images, is refused before the held-out split is read or an attack runs.

A model that does not state its channels is also held to its first convolution: one-channel
images reaching a `Conv2d(3, ...)` as three channels (a three-channel normalisation broadcasts
them) are refused rather than trained on. A model that turns gray images into RGB on purpose says
so with its `in_channels` (a recorded init argument, or an attribute).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import torch
from torch import Tensor, nn

from robust_train.core.runtime import eval_mode

__all__ = [
    "DataMismatchError",
    "check_model_fits_data",
    "data_classes",
    "data_shape",
    "first_conv_channels",
    "model_input",
]


class DataMismatchError(ValueError):
    """The data does not fit the model (channels, image size or number of classes)."""

    user_error = True  # robust_train.app.cli: one line, exit code 2


def _shape(channels: int | None, size: tuple[int, int] | None) -> str:
    """ "1x28x28"; "3 channels (any size)" or "?x28x28" where one side is not stated."""
    if size is None:
        return "any shape" if channels is None else f"{channels} channel(s) (any size)"
    return f"{'?' if channels is None else channels}x{size[0]}x{size[1]}"


def _pair(value: Any) -> tuple[int, int] | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    if (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(isinstance(v, int) for v in value)
    ):
        return (int(value[0]), int(value[1]))
    return None


def model_input(model: nn.Module) -> tuple[int | None, tuple[int, int] | None]:
    """(channels, (height, width)) the model says it takes, from its recorded constructor
    arguments (`in_channels`, `input_size` or `image_size`); None where it does not say.

    Examples:
        >>> from robust_train.models import MNISTConvNet, TorchvisionClassifier
        >>> model_input(MNISTConvNet(hidden=8))
        (1, (28, 28))
        >>> model_input(nn.Linear(3, 2))
        (None, None)
    """
    init_args = (getattr(model, "__dict__", {}).get("_model_config") or {}).get("init_args", {})
    channels = init_args.get("in_channels")
    size = _pair(init_args.get("input_size", init_args.get("image_size")))
    return (channels if isinstance(channels, int) else None), size


def _declared(datamodule: Any, name: str) -> Any:
    try:
        return getattr(datamodule, name)
    except (NotImplementedError, AttributeError, OSError, ValueError, TypeError):
        return None


def data_shape(datamodule: Any) -> tuple[int, int, int] | None:
    """(channels, height, width) a data module declares before `setup` (`in_channels` and
    `image_size`, as every `robust_train.data` module does), or None."""
    channels, size = (
        _declared(datamodule, "in_channels"),
        _pair(_declared(datamodule, "image_size")),
    )
    if isinstance(channels, int) and size is not None:
        return (channels, *size)
    return None


def data_classes(datamodule: Any) -> int | None:
    """The number of classes a data module declares (`num_classes`), or None."""
    n = _declared(datamodule, "num_classes")
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def _first_image(batches: Iterable[Any] | None) -> Tensor | None:
    for batch in batches or ():
        images = batch[0] if isinstance(batch, (list, tuple)) else batch
        return images[:1]
    return None


class _FirstConv(Exception):
    """Stops the channel probe at the first convolution, carrying its name and in_channels."""

    def __init__(self, name: str, in_channels: int) -> None:
        super().__init__(name)
        self.name, self.in_channels = name, in_channels


def first_conv_channels(model: nn.Module, image: Tensor) -> tuple[str, int] | None:
    """(name, in_channels) of the first convolution `model` runs on `image` (it stops there, so
    this costs less than a forward); None if none runs or the model fails before one.

    Examples:
        >>> net = nn.Sequential(nn.Identity(), nn.Conv2d(3, 4, 3), nn.Conv2d(4, 2, 1))
        >>> first_conv_channels(net, torch.zeros(1, 3, 8, 8))
        ('1', 3)
    """
    names = {module: name for name, module in model.named_modules()}

    def stop(module: nn.Module, _inputs: Any) -> None:
        channels = cast(int, module.in_channels)
        raise _FirstConv(names.get(module, type(module).__name__), channels)

    convs = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
    hooks = [m.register_forward_pre_hook(stop) for m in model.modules() if isinstance(m, convs)]
    param = next(model.parameters(), None)
    try:
        with torch.no_grad(), eval_mode(model):
            model(image.to(param.device) if param is not None else image)
    except _FirstConv as found:
        return found.name, found.in_channels
    except Exception:  # noqa: BLE001 - the full probe reports the model's own error
        return None
    finally:
        for hook in hooks:
            hook.remove()
    return None


def _check_first_conv(model: nn.Module, image: Tensor, name: str, data: str, given: str) -> None:
    stated = getattr(model, "in_channels", None)
    if isinstance(stated, int) and stated == image.shape[1]:
        return  # the model adapts the channels itself, and says so
    found = first_conv_channels(model, image)
    if found is None or found[1] == image.shape[1]:
        return
    layer, channels = found
    raise DataMismatchError(
        f"the model ({name}) expects {channels}-channel images (its first convolution "
        f"{layer!r} has in_channels={channels}) but the data ({data}) gives {given} (channels x "
        "height x width); make them agree (e.g. ImageFolderDataModule's grayscale), or give the "
        "model an `in_channels` attribute if it converts the channels itself"
    )


def _probe(model: nn.Module, image: Tensor, name: str, given: str, expects: str) -> Tensor:
    param = next(model.parameters(), None)
    image = image.to(param.device) if param is not None else image
    try:
        with torch.no_grad(), eval_mode(model):
            return model(image)
    except Exception as err:  # the model's own error: a shape it cannot take
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        stated = "" if expects == "any shape" else f", which states {expects}"
        raise DataMismatchError(
            f"the model ({name}{stated}) cannot take the data's images ({given}): {first}"
        ) from err


def check_model_fits_data(
    model: nn.Module, datamodule: Any, batches: Iterable[Any] | None = None, *, data: str = ""
) -> None:
    """Refuse data whose images or classes do not fit `model`, with one probe forward.

    Args:
        model: the classifier.
        datamodule: the data module; its declared `in_channels`, `image_size` and `num_classes`
            are used (no data is read when it declares its shape).
        batches: where to take one image from when the module does not declare its shape (e.g.
            its test dataloader).
        data: a name for the data in messages (default: the module's class name).

    Raises:
        DataMismatchError: channels or image size differ from what the model states (or, when
            it states no channels, from its first convolution's), the model cannot run on one
            image of the data, or its number of outputs is not the data's
            number of classes; the message names both sides.

    Examples:
        >>> from robust_train.data import SyntheticDataModule
        >>> from robust_train.models import SmallCNN
        >>> check_model_fits_data(SmallCNN(num_classes=3), SyntheticDataModule(
        ...     image_size=8, in_channels=1, num_classes=3))
        >>> try:
        ...     check_model_fits_data(SmallCNN(num_classes=3), SyntheticDataModule(
        ...         image_size=8, in_channels=1, num_classes=10))
        ... except DataMismatchError as err:
        ...     print(err)
        the model (SmallCNN) has 3 outputs but the data (SyntheticDataModule) has 10 classes
    """
    name, data = type(model).__name__, data or type(datamodule).__name__
    channels, size = model_input(model)
    shape = data_shape(datamodule)
    image = torch.zeros(1, *shape) if shape is not None else _first_image(batches)
    if image is None:
        return  # nothing to probe with: the evaluation's own checks apply
    given = _shape(int(image.shape[1]), (int(image.shape[2]), int(image.shape[3])))
    expects = _shape(channels, size)
    wrong_channels = channels is not None and channels != image.shape[1]
    if wrong_channels or (size is not None and size != tuple(image.shape[2:])):
        raise DataMismatchError(
            f"the model ({name}) expects images of {expects} but the data ({data}) gives {given} "
            "(channels x height x width)"
        )
    if channels is None:
        _check_first_conv(model, image, name, data, given)
    logits = _probe(model, image, name, given, expects)
    n_classes = data_classes(datamodule)
    if not isinstance(logits, Tensor):
        raise DataMismatchError(
            f"the model ({name}) returns a {type(logits).__name__} for one image of {given}; a "
            "classifier returns a tensor of logits (1, number of classes)"
        )
    if logits.dim() != 2 or logits.shape[0] != 1:
        raise DataMismatchError(
            f"the model ({name}) gives outputs of shape {tuple(logits.shape)} for one image of "
            f"{given}; a classifier gives (1, number of classes)"
        )
    if n_classes is not None and logits.shape[1] != n_classes:
        raise DataMismatchError(
            f"the model ({name}) has {logits.shape[1]} outputs but the data ({data}) has "
            f"{n_classes} classes"
        )
