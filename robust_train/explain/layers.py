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
    `model.named_modules()`), or of the default layer (`default_layer`) when `layer` is None.

    Errors name the argument, the value and some valid names (convolutions first).

    Examples:
        >>> net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Conv2d(2, 2, 3), nn.ReLU())
        >>> find_layer(net, None)[0], type(find_layer(net, "1")[1]).__name__
        ('3', 'ReLU')
        >>> find_layer(net, "4")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: `layer` '4' is not a module of Sequential; valid names include ['0', '2', ...
    """
    modules = dict(model.named_modules())
    if layer is None:
        name = default_layer(model, argument=argument, caller=caller)
        return name, modules[name]
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


# Module types a default layer passes over between a convolution and its activation, the
# activations of a convolutional block, and the pools that may follow one.
_PASSED = (nn.BatchNorm2d, nn.GroupNorm, nn.InstanceNorm2d, nn.LayerNorm, nn.Dropout, nn.Identity)
ACTIVATIONS: tuple[type[nn.Module], ...] = (
    nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.ELU, nn.SELU, nn.CELU, nn.GELU, nn.SiLU,
    nn.Mish, nn.Hardswish, nn.Softplus,
)  # fmt: skip
_POOLS = (nn.MaxPool2d, nn.AvgPool2d)


def default_layer(model: nn.Module, *, argument: str = "layer", caller: str = "explainer") -> str:
    """The dotted name of a layer explainer's default layer: the last convolutional block's
    rectified output, found from the modules (no forward), as common Grad-CAM practice chooses it
    (a torchvision ResNet's `layer4[-1]`, a VGG's last pool).

    From the LAST `nn.Conv2d` in `model.modules()` order, its container's later children are
    read in order, passing over normalisation, dropout and identity modules: the first
    activation module (`ACTIVATIONS`: ReLU, Softplus, SiLU, ...) is the block's rectified
    output, and a `nn.MaxPool2d` / `nn.AvgPool2d` right after it, when there is one, is taken
    instead (the activation's spatial pool). A container that ends before an activation is left
    for its parent's later children, as long as the containers are `nn.Sequential` (whose
    children run in order). Inside any other module, a block such as a ResNet `BasicBlock`
    whose `forward` is code, the order is unknown: the block itself is the layer (its output is
    what the next block reads; ResNet blocks end in their ReLU). With neither (the model's own
    `forward` calls the convolution and then a functional activation), the convolution itself.
    An activation module that appears twice in the model (one `nn.ReLU` shared by several
    calls) is not taken either. Pass `layer` for anything else.

    Examples:
        >>> net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.MaxPool2d(2),
        ...                     nn.Flatten(), nn.Linear(2, 2))
        >>> default_layer(net)
        '3'
        >>> import torchvision
        >>> default_layer(torchvision.models.resnet18())
        'layer4.1'
    """
    named = dict(model.named_modules())
    convs = [name for name, module in named.items() if isinstance(module, nn.Conv2d)]
    if not convs:
        raise ValueError(
            f"{caller}: {type(model).__name__} has no nn.Conv2d, so there is no default "
            f"layer; pass `{argument}` = the dotted name of a module whose output is "
            f"(B, K, h, w), one of {_some(named)}"
        )
    shared, path = _shared(model), convs[-1]
    while True:
        parent_name, _, child = path.rpartition(".")
        parent = named[parent_name]
        if isinstance(parent, (nn.ModuleList, nn.ModuleDict)):
            return convs[-1]
        if not isinstance(parent, nn.Sequential):
            return parent_name or convs[-1]  # a block whose forward is code, or the model
        status, name = _after(parent, child, shared)
        if status == "found":
            return f"{parent_name}.{name}" if parent_name else name
        if status == "stop" or not parent_name:
            return convs[-1]
        path = parent_name


def _after(parent: nn.Sequential, child: str, shared: set[int]) -> tuple[str, str]:
    """("found", name) of the activation that follows `child` in `parent`, or of the pool right
    after it, passing over `_PASSED` modules; ("stop", "") when another module comes first;
    ("end", "") when `parent` ends first."""
    later = list(parent._modules)
    later = later[later.index(child) + 1 :]
    for i, name in enumerate(later):
        module = parent._modules[name]
        if isinstance(module, _PASSED):
            continue
        if not isinstance(module, ACTIVATIONS) or id(module) in shared:
            return "stop", ""
        following = parent._modules[later[i + 1]] if i + 1 < len(later) else None
        if isinstance(following, _POOLS) and id(following) not in shared:
            return "found", later[i + 1]
        return "found", name
    return "end", ""


def _shared(model: nn.Module) -> set[int]:
    """Ids of the modules that appear more than once in `model` (called from several places)."""
    seen: dict[int, int] = {}
    for _, module in model.named_modules(remove_duplicate=False):
        seen[id(module)] = seen.get(id(module), 0) + 1
    return {key for key, count in seen.items() if count > 1}


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

    Examples:
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
