"""The classification head of a model, found one way for every caller (fine-tuning with a frozen
backbone, replacing a torchvision head, reading its number of outputs)."""

from __future__ import annotations

from typing import NamedTuple

from torch import nn

__all__ = ["HEAD_ATTRS", "Head", "find_head"]

HEAD_ATTRS = ("fc", "classifier", "head", "heads")


class Head(NamedTuple):
    """Where the head sits: `getattr(parent, attr)` is the layer, `name` its qualified name."""

    parent: nn.Module
    attr: str
    name: str

    @property
    def module(self) -> nn.Module:
        """The head layer itself."""
        return getattr(self.parent, self.attr)


def find_head(model: nn.Module, head: str | None = None) -> Head:
    """The final classification layer of `model`.

    Looked up in this order: the attribute path `head` when given; a Linear/Conv2d (or a
    Sequential ending in one) at one of `HEAD_ATTRS` (torchvision's `fc`, `classifier`, `head`,
    `heads`); the last nn.Linear of `model.modules()`.

    Args:
        model: the classifier.
        head: attribute path of the head (e.g. "fc", "backbone.fc"), or None to search.

    Returns:
        A `Head` (parent module, attribute name, qualified name).

    Raises:
        ValueError: `head` is not a submodule of `model`, or no head was found.

    Examples:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        >>> find_head(net).name, find_head(net, "1").module
        ('3', Linear(in_features=4, out_features=8, bias=True))
    """
    if head is not None:
        try:
            model.get_submodule(head)
        except AttributeError as err:
            raise ValueError(f"`head` {head!r} is not a submodule of the model") from err
        return _at(model, head)
    for attr in HEAD_ATTRS:
        module = getattr(model, attr, None)
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            return Head(model, attr, attr)
        if isinstance(module, nn.Sequential):
            for child_name, child in reversed(list(module.named_children())):
                if isinstance(child, (nn.Linear, nn.Conv2d)):
                    return Head(module, child_name, f"{attr}.{child_name}")
    linears = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ValueError(
            f"Cannot find the classification head of {type(model).__name__}: no Linear/Conv2d "
            f"(or Sequential ending in one) at {list(HEAD_ATTRS)} and no nn.Linear; pass `head=` "
            "(attribute path)"
        )
    return _at(model, linears[-1])


def _at(model: nn.Module, path: str) -> Head:
    parent_path, _, attr = path.rpartition(".")
    return Head(model.get_submodule(parent_path), attr, path)
