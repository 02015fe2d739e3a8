"""Layers by name for the layer explainers: look a module up, capture its activation.

Layer methods take the layer by dotted module name and look it up on the model they are GIVEN at
call time (`find_layer`), as Captum's layer methods take a layer: the same name then works on the
model, on a copy of it and on a checkpoint loaded later. `capture_output` records what the layer
returned during one forward with a hook that is removed when the block ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import Tensor, nn

__all__ = ["capture_output", "find_layer"]

_SHOWN = 8  # valid names quoted in an error


def find_layer(
    model: nn.Module, layer: str | None, *, argument: str = "layer", caller: str = "explainer"
) -> tuple[str, nn.Module]:
    """`(name, module)` of the module of `model` called `layer` (a dotted name as in
    `model.named_modules()`), or of the LAST `nn.Conv2d` in `model.modules()` order when `layer`
    is None.

    Errors name the argument, the value and some valid names (convolutions first).

    Example:
        >>> net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Conv2d(2, 2, 3))
        >>> find_layer(net, None)[0], type(find_layer(net, "1")[1]).__name__
        ('2', 'ReLU')
        >>> find_layer(net, "3")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `layer` '3' is not a module of Sequential; valid names include ['0', '2', ...
    """
    modules = dict(model.named_modules())
    if layer is None:
        convs = [name for name, module in modules.items() if isinstance(module, nn.Conv2d)]
        if not convs:
            raise ValueError(
                f"{caller}: {type(model).__name__} has no nn.Conv2d, so there is no default "
                f"layer; pass `{argument}` = the dotted name of a module whose output is "
                f"(B, K, h, w), one of {_some(modules)}"
            )
        return convs[-1], modules[convs[-1]]
    if not isinstance(layer, str):
        raise TypeError(
            f"`{argument}` must be a module name (str) or None, got {type(layer).__name__}"
        )
    if layer not in modules or layer == "":
        raise ValueError(
            f"`{argument}` {layer!r} is not a module of {type(model).__name__}; valid names "
            f"include {_some(modules)}"
        )
    return layer, modules[layer]


def _some(modules: dict[str, nn.Module]) -> list[str]:
    """Up to `_SHOWN` module names, convolutions first, then the others in model order."""
    names = [name for name in modules if name]
    convs = [name for name in names if isinstance(modules[name], nn.Conv2d)]
    ordered = convs + [name for name in names if name not in set(convs)]
    return ordered[:_SHOWN] + (["..."] if len(ordered) > _SHOWN else [])


class _Captured:
    """What `capture_output` yields: the outputs of the layer's calls, in call order."""

    def __init__(self) -> None:
        self.outputs: list[Tensor] = []


@contextmanager
def capture_output(module: nn.Module, name: str, *, caller: str) -> Iterator[_Captured]:
    """Record the output of `module` during the block, for each call (`outputs`).

    The hook hands the rest of the model a CLONE of the output, so that a downstream in-place
    operation (VGG's `Conv2d -> ReLU(inplace=True)`) cannot overwrite the recorded activation;
    gradients with respect to the recorded tensor flow through the clone. The hook is removed
    when the block ends, also on error. A module that returns something other than a tensor
    raises a TypeError naming it.

    Example:
        >>> import torch
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.ReLU(inplace=True))
        >>> x = -torch.ones(1, 2)
        >>> with capture_output(net[0], "0", caller="demo") as seen:
        ...     _ = net(x)
        >>> torch.equal(seen.outputs[0], net[0](x)), len(net[0]._forward_hooks)
        (True, 0)
    """
    captured = _Captured()

    def hook(_module: nn.Module, _args: Any, output: Any) -> Tensor:
        if not isinstance(output, Tensor):
            raise TypeError(
                f"{caller}: layer {name!r} ({type(module).__name__}) returned "
                f"{type(output).__name__}, not a tensor; choose a module that returns one"
            )
        captured.outputs.append(output)
        return output.clone()

    handle = module.register_forward_hook(hook)
    try:
        yield captured
    finally:
        handle.remove()
