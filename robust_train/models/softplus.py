"""beta-smoothing: swap every ReLU for Softplus(beta) (Dombrowski et al., NeurIPS 2019).

ReLU networks have zero second derivative almost everywhere, so attacks on gradient explanations
take their direction on a softplus copy (Ghorbani et al. 2019), and training with softplus lowers
the curvature that bounds explanation manipulation.
"""

from __future__ import annotations

import copy

from torch import nn

from robust_train._validation import check_positive

_RELU_TYPES: tuple[type[nn.Module], ...] = (nn.ReLU, nn.ReLU6)


def softplus(model: nn.Module, beta: float, *, threshold: float = 20.0, inplace: bool = False) -> nn.Module:
    """Return a copy of `model` with every nn.ReLU (inplace or not) replaced by nn.Softplus(beta).

    The weights are shared by value (deep copy), the train/eval mode is kept. With `inplace=True`
    the given model itself is modified and returned.

    Args:
        model: any module tree; ReLUs called functionally (F.relu in forward) cannot be found and
            are reported by `count_relus` as 0.
        beta: softplus sharpness (> 0); larger is closer to ReLU.

    Example:
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.ReLU(inplace=True))
        >>> smooth = softplus(net, beta=10.0)
        >>> type(smooth[1]).__name__, type(net[1]).__name__
        ('Softplus', 'ReLU')
    """
    check_positive(beta, "beta")
    target = model if inplace else copy.deepcopy(model)
    _swap(target, float(beta), threshold)
    return target


def _swap(module: nn.Module, beta: float, threshold: float) -> None:
    for name, child in module.named_children():
        if isinstance(child, _RELU_TYPES):
            setattr(module, name, nn.Softplus(beta=beta, threshold=threshold))
        else:
            _swap(child, beta, threshold)


def count_relus(model: nn.Module) -> int:
    """Number of ReLU modules in `model` (0 means `softplus` would change nothing)."""
    return sum(isinstance(m, _RELU_TYPES) for m in model.modules())
