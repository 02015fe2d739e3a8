"""The ReLU that ends a map (Grad-CAM's), and its softplus surrogate for ascent directions.

Grad-CAM is ReLU(sum_k w_k A_k): where the sum is negative the map is exactly 0, and so is its
gradient, so an ascent on a top-k objective cannot raise a pixel outside the map's support. When
a map has fewer positive pixels than k, its whole support lies in the clean top-k set and the
ascent has no direction, although moving the support would change the top-k set.

Inside `smooth_map_clamps(beta)` the clamp computes s * softplus_beta(z / s) instead, with s the
per-sample max |z| (detached: the surrogate does not depend on the map's scale): positive
everywhere, so the direction reaches every pixel, and within s * log(2) / beta of the ReLU
(at z = 0). Attacks take their direction, and penalties their inner ascent, inside it; the map
that is measured or penalised is always the exact ReLU. This is separate from `smooth_relus`,
which replaces the model's own ReLUs for maps that are piecewise constant (the gradient family):
a Grad-CAM map moves with the input, so its direction is taken on the model itself, with only
this last clamp smoothed. The design notes say why an ascent blind to sparse maps matters.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

import torch.nn.functional as F
from torch import Tensor

from robust_train.models.softplus import NoSmoothing, SmoothReLUs, smooth_relus

__all__ = ["clamp_positive", "direction_surrogates", "smooth_map_clamps"]

_BETA: contextvars.ContextVar[float | None] = contextvars.ContextVar("map_clamp_beta", default=None)


@contextmanager
def smooth_map_clamps(beta: float | None) -> Iterator[None]:
    """Within the block, `clamp_positive` computes its scale-free softplus_beta surrogate (None:
    the exact ReLU, the block does nothing).

    Examples:
        >>> import torch
        >>> z = torch.tensor([[-1.0, 0.0, 2.0]])
        >>> clamp_positive(z).tolist()
        [[0.0, 0.0, 2.0]]
        >>> with smooth_map_clamps(10.0):
        ...     [round(v, 3) for v in clamp_positive(z)[0].tolist()]
        [0.001, 0.139, 2.0]
    """
    token = _BETA.set(beta)
    try:
        yield
    finally:
        _BETA.reset(token)


def clamp_positive(z: Tensor) -> Tensor:
    """ReLU of a batch of maps `z` (B, ...); inside `smooth_map_clamps(beta)`, s * softplus_beta(
    z / s) with s the per-sample max |z| (detached).

    Examples:
        >>> import torch
        >>> clamp_positive(torch.tensor([[-2.0, 3.0]])).tolist()
        [[0.0, 3.0]]
    """
    beta = _BETA.get()
    if beta is None:
        return z.clamp_min(0)
    scale = z.detach().abs().flatten(1).amax(1).clamp_min(1e-12)
    scale = scale.view(-1, *[1] * (z.dim() - 1))
    return F.softplus(z / scale, beta=beta) * scale


@contextmanager
def direction_surrogates(
    beta: float | None, piecewise_constant: bool
) -> Iterator[SmoothReLUs | NoSmoothing]:
    """The surrogates an ascent direction on a map is taken on (attacks, penalties' inner
    ascents), defined once: the model's ReLUs compute softplus_beta where the explainer's map is
    piecewise constant on ReLU nets (`robust_train.models.softplus.smooth_relus`), and a map's
    own final ReLU (Grad-CAM's) its scale-free softplus_beta surrogate for every explainer
    (`smooth_map_clamps`); `beta=None`: neither. Yields the `smooth_relus` mode (its `calls`
    count the model's intercepted ReLU calls).

    Examples:
        >>> import torch
        >>> with direction_surrogates(10.0, piecewise_constant=False) as mode:
        ...     y = torch.relu(torch.zeros(1)), clamp_positive(torch.tensor([[0.0, 1.0]]))
        >>> mode.calls, y[0].item(), round(y[1][0, 0].item(), 3)
        (0, 0.0, 0.069)
    """
    with smooth_relus(beta if piecewise_constant else None) as relus, smooth_map_clamps(beta):
        yield relus
