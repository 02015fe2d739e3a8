"""beta-smoothing: swap every ReLU for Softplus(beta) (Dombrowski et al., NeurIPS 2019).

ReLU networks have zero second derivative almost everywhere, so attacks on gradient explanations
take their direction on a softplus copy (Ghorbani et al. 2019), and training with softplus lowers
the curvature that bounds explanation manipulation.

ReLU modules (`nn.ReLU`, `nn.ReLU6`) are swapped in place on a copy. ReLUs called functionally in
`forward` (`F.relu`, `torch.relu`, `x.relu()`, and their in-place forms) are not modules; with
`functional=True` the copy is traced with `torch.fx` and those calls are rewritten to
`F.softplus(x, beta, threshold)`. A model that `torch.fx` cannot trace (data-dependent control
flow) keeps its functional ReLUs; `count_functional_relus` returns None for it.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from robust_train._validation import check_positive

__all__ = ["count_functional_relus", "count_relus", "softplus"]

_RELU_TYPES: tuple[type[nn.Module], ...] = (nn.ReLU, nn.ReLU6)
_RELU_FUNCTIONS = (F.relu, F.relu_, torch.relu, torch.relu_, torch.nn.functional.relu6)
_RELU_METHODS = ("relu", "relu_")


def softplus(
    model: nn.Module,
    beta: float,
    *,
    threshold: float = 20.0,
    inplace: bool = False,
    functional: bool = False,
) -> nn.Module:
    """Return a copy of `model` with every ReLU replaced by a softplus of sharpness `beta`.

    The weights are shared by value (deep copy), the train/eval mode is kept. With `inplace=True`
    the given model itself is modified and returned (modules only).

    Args:
        model: any module tree.
        beta: softplus sharpness (> 0); larger is closer to ReLU.
        threshold: softplus reverts to the identity above this (beta * x).
        inplace: modify `model` itself (ReLU modules only; `functional` needs a traced copy).
        functional: also rewrite functional ReLU calls, through a `torch.fx` trace; returns a
            `torch.fx.GraphModule` when some were found, the module-swapped copy otherwise
            (including when the model cannot be traced).

    Example:
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.ReLU(inplace=True))
        >>> smooth = softplus(net, beta=10.0)
        >>> type(smooth[1]).__name__, type(net[1]).__name__
        ('Softplus', 'ReLU')
        >>> class Functional(nn.Module):
        ...     def forward(self, x):
        ...         return F.relu(x) - 1
        >>> x = torch.tensor([-1.0, 0.0])
        >>> torch.allclose(softplus(Functional(), 2.0, functional=True)(x), F.softplus(x, 2.0) - 1)
        True
    """
    check_positive(beta, "beta")
    if inplace and functional:
        raise ValueError("`functional=True` rewrites a traced copy; it cannot be `inplace`")
    target = model if inplace else copy.deepcopy(model)
    _swap(target, float(beta), threshold)
    if functional:
        traced = _rewrite_functional(target, float(beta), threshold)
        if traced is not None:
            return traced
    return target


def _swap(module: nn.Module, beta: float, threshold: float) -> None:
    for name, child in module.named_children():
        if isinstance(child, _RELU_TYPES):
            setattr(module, name, nn.Softplus(beta=beta, threshold=threshold))
        else:
            _swap(child, beta, threshold)


def _trace(model: nn.Module) -> torch.fx.GraphModule | None:
    try:
        return torch.fx.symbolic_trace(model)
    except Exception:  # noqa: BLE001  (any tracing failure means: cannot rewrite)
        return None


def _is_relu_call(node: torch.fx.Node) -> bool:
    if node.op == "call_function":
        return node.target in _RELU_FUNCTIONS
    return node.op == "call_method" and node.target in _RELU_METHODS


def _rewrite_functional(model: nn.Module, beta: float, threshold: float) -> nn.Module | None:
    graph_module = _trace(model)
    if graph_module is None:
        return None
    found = 0
    for node in list(graph_module.graph.nodes):
        if not _is_relu_call(node):
            continue
        with graph_module.graph.inserting_after(node):
            smooth = graph_module.graph.call_function(
                F.softplus, (node.args[0],), {"beta": beta, "threshold": threshold}
            )
        node.replace_all_uses_with(smooth)
        graph_module.graph.erase_node(node)
        found += 1
    if not found:
        return None
    graph_module.recompile()
    graph_module.train(model.training)
    return graph_module


def count_relus(model: nn.Module) -> int:
    """Number of ReLU modules in `model` (0 means the module swap of `softplus` changes nothing).

    Example:
        >>> count_relus(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
        1
    """
    return sum(isinstance(m, _RELU_TYPES) for m in model.modules())


def count_functional_relus(model: nn.Module) -> int | None:
    """Number of functional ReLU calls in `model.forward` (found by a `torch.fx` trace), or None
    when the model cannot be traced.

    Example:
        >>> count_functional_relus(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
        0
    """
    graph_module = _trace(model)
    if graph_module is None:
        return None
    return sum(_is_relu_call(node) for node in graph_module.graph.nodes)
