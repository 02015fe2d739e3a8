"""The softplus surrogate of a ReLU network, defined once (Dombrowski et al., NeurIPS 2019).

ReLU networks have zero second derivative almost everywhere: the gradient map of a ReLU net is
piecewise constant in the input, so the gradient of anything computed from it (an attack
objective, a map distance) is exactly zero. Ghorbani et al. (2019) take attack directions on a
copy with softplus_beta activations and the same weights; the explanation-smoothness ascent does
the same. Two tools live here:

- `smooth_relus(beta)`: a context in which EVERY ReLU call computes softplus_beta instead: ReLU
  modules (`nn.ReLU`, `nn.ReLU6`, which call `F.relu`/`F.relu6`), functional calls (`F.relu`,
  `torch.relu`, `x.relu()`, in-place forms) alike. It is a `torch.overrides.TorchFunctionMode`:
  no copy of the model, nothing traced, nothing swapped, so the parameters, buffers and modes are
  the model's own and nothing needs restoring; the backward pass is not affected. The attacks and
  the training penalties both use it, and `zero_direction_cause` is their one diagnosis when a
  direction is still zero. In-place forms return a new tensor (the model must use the returned
  value, as `nn.ReLU(inplace=True)` does).
- `softplus(model, beta)`: a copy (or, `inplace=True`, the model itself) whose ReLU modules are
  replaced by `nn.Softplus(beta)` for good: beta-smoothing as a training choice
  (`RobustClassifier(softplus_beta=...)`), recorded in checkpoints.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from robust_train.core.interception import NOT_INTERCEPTED, CallInterceptor
from robust_train.core.validation import check_positive

__all__ = [
    "SmoothReLUs",
    "count_relus",
    "smooth_relus",
    "smoothing_active",
    "softplus",
    "zero_direction_cause",
]

RELU_TYPES: tuple[type[nn.Module], ...] = (nn.ReLU, nn.ReLU6)
_RELU_CALLS = frozenset(
    (F.relu, F.relu_, torch.relu, torch.relu_, Tensor.relu, Tensor.relu_)  # type: ignore[arg-type]
)
_RELU6_CALLS = frozenset((F.relu6,))


class SmoothReLUs(CallInterceptor):
    """TorchFunctionMode computing softplus_beta for every ReLU call; `calls` counts them.

    Examples:
        >>> with SmoothReLUs(2.0) as mode:
        ...     y = torch.relu(torch.zeros(2)) + nn.ReLU()(torch.zeros(2))
        >>> mode.calls, torch.allclose(y, 2 * F.softplus(torch.zeros(2), beta=2.0))
        (2, True)
    """

    def __init__(self, beta: float, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta, self.threshold = float(beta), float(threshold)
        self.calls = 0

    def intercept(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if func in _RELU_CALLS:
            self.calls += 1
            return F.softplus(args[0], beta=self.beta, threshold=self.threshold)
        if func in _RELU6_CALLS:
            self.calls += 1
            x = args[0]
            return F.softplus(x, self.beta, self.threshold) - F.softplus(
                x - 6.0, self.beta, self.threshold
            )
        return NOT_INTERCEPTED


class NoSmoothing:
    """What `smooth_relus(None)` yields: nothing intercepted."""

    beta = None
    calls = 0


@contextmanager
def smooth_relus(beta: float | None) -> Iterator[SmoothReLUs | NoSmoothing]:
    """Inside the block every ReLU call (modules and functional) computes softplus_beta;
    `beta=None` changes nothing. Yields the mode, whose `calls` counts the intercepted calls.

    Examples:
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.ReLU(inplace=True), nn.Linear(2, 1))
        >>> x = torch.rand(3, 2)
        >>> with smooth_relus(10.0) as mode:
        ...     smooth = net(x)
        >>> mode.calls, torch.allclose(smooth, softplus(net, 10.0)(x))
        (1, True)
        >>> type(net[1]).__name__  # the model is untouched
        'ReLU'
    """
    if beta is None:
        yield NoSmoothing()
        return
    check_positive(beta, "beta")
    global _DEPTH
    _DEPTH += 1
    try:
        with SmoothReLUs(beta) as mode:
            yield mode
    finally:
        _DEPTH -= 1


_DEPTH = 0


def smoothing_active() -> bool:
    """Whether the calling code runs inside `smooth_relus` (on the surrogate).

    Examples:
        >>> with smooth_relus(1.0):
        ...     inside = smoothing_active()
        >>> inside, smoothing_active()
        (True, False)
    """
    return _DEPTH > 0


def softplus(
    model: nn.Module, beta: float, *, threshold: float = 20.0, inplace: bool = False
) -> nn.Module:
    """Return a copy of `model` with every ReLU module replaced by a softplus of sharpness `beta`.

    The weights are copied (deep copy), the train/eval mode is kept; with `inplace=True` the
    given model itself is modified and returned. ReLUs called functionally in `forward` are not
    modules and stay ReLUs here; `smooth_relus` reaches those too, for the duration of a block.

    Examples:
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
        if isinstance(child, RELU_TYPES):
            setattr(module, name, nn.Softplus(beta=beta, threshold=threshold))
        else:
            _swap(child, beta, threshold)


def count_relus(model: nn.Module) -> int:
    """Number of ReLU modules in `model` (0 means the module swap of `softplus` changes nothing).

    Examples:
        >>> count_relus(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
        1
    """
    return sum(isinstance(m, RELU_TYPES) for m in model.modules())


def zero_direction_cause(
    model: nn.Module,
    *,
    beta: float | None,
    relu_calls: int,
    clean_map: Tensor,
    clean_logits: Tensor | None = None,
    piecewise_constant: bool = True,
    beta_name: str = "beta",
) -> str:
    """Why an ascent direction (attack, explanation-smoothness ascent) stayed exactly zero.

    The one diagnosis of every caller of `smooth_relus`, most likely cause first: non-finite
    parameters or logits (a diverged fit), constant clean maps (dead or saturated units), a
    piecewise-linear model without the surrogate (`beta` None), a surrogate that met no ReLU
    (another piecewise-linear activation), else a vanished gradient on the surrogate.

    Args:
        model: the model whose explanation was ascended.
        beta: the softplus beta used for the direction, or None when none was used.
        relu_calls: ReLU calls `smooth_relus` intercepted while the direction was taken.
        clean_map: clean importance maps (B, H, W) of the samples concerned.
        clean_logits: their clean logits, when known.
        piecewise_constant: the explainer's map is piecewise constant on ReLU nets
            (`ExplainerSpec.piecewise_constant`).
        beta_name: the caller's argument that sets the beta, named in the advice.

    Examples:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
        >>> zero_direction_cause(net, beta=None, relu_calls=0, clean_map=torch.zeros(1, 2, 2))[:37]
        'the clean explanation maps are consta'
    """
    bad = [n for n, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
    if bad:
        return (
            f"the model has non-finite parameters ({', '.join(bad[:3])}): training diverged "
            "(e.g. a learning rate far too large); use a checkpoint from before"
        )
    if clean_logits is not None and not bool(torch.isfinite(clean_logits).all()):
        return "the model's logits are non-finite: training diverged or the inputs overflow it"
    flat = clean_map.flatten(1)
    if bool((flat.amax(1) == flat.amin(1)).any()):
        return (
            "the clean explanation maps are constant (all units dead or saturated, e.g. after a "
            "diverged training run): there is no explanation to move"
        )
    if beta is None and piecewise_constant:
        return (
            "the model is piecewise linear (zero second derivative) and no softplus surrogate "
            f"was used (`{beta_name}` is None), so the gradient map is piecewise constant in x; "
            f"set `{beta_name}` (e.g. 10.0) or use a smooth model"
        )
    if beta is not None and relu_calls == 0:
        return (
            "the softplus surrogate met no ReLU call (the model uses another piecewise-linear "
            "activation, e.g. LeakyReLU or only max-pooling), so its map stays locally constant "
            "in x; use ReLU or a smooth activation"
        )
    return f"the gradient vanished on the softplus surrogate (saturation); lower `{beta_name}`"
