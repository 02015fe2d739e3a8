"""Confidence bounds of the certificates: exact binomial (Clopper-Pearson) intervals, made
simultaneous over the pixels of a map by a union (Bonferroni) bound.

Each pixel i of a smoothed sparsified map has a probability p_i (the chance that pixel i is in the
top-kappa set of the explainer's map of a noisy copy of the image); n independent noisy copies give
a count c_i ~ Binomial(n, p_i). The Clopper-Pearson interval (Clopper & Pearson 1934; used for
randomized smoothing by Cohen, Rosenfeld & Kolter 2019) of level 1 - a is

    lower = Beta^-1(a / 2; c, n - c + 1)      (0 when c = 0)
    upper = Beta^-1(1 - a / 2; c + 1, n - c)  (1 when c = n)

and covers p_i with probability >= 1 - a whatever p_i is. Giving every one of the d pixels the
level a = alpha / d makes all d intervals hold AT ONCE with probability >= 1 - alpha (the union
bound: the chance that some interval misses is at most d * alpha / d; no independence between the
pixels is needed, and the counts of one image are strongly dependent).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from robust_train.core.validation import check_positive

__all__ = ["check_alpha", "clopper_pearson", "simultaneous_bounds"]


def check_alpha(alpha: object, name: str = "alpha") -> float:
    """Raise unless `alpha` is a number strictly between 0 and 1; return it as a float.

    Examples:
        >>> check_alpha(0.05)
        0.05
        >>> check_alpha(1.0)
        Traceback (most recent call last):
        ...
        ValueError: `alpha` must lie strictly between 0 and 1 (a failure probability), got 1.0
    """
    check_positive(alpha, name)
    if not alpha < 1:  # type: ignore[operator]
        raise ValueError(
            f"`{name}` must lie strictly between 0 and 1 (a failure probability), got {alpha!r}"
        )
    return float(alpha)  # type: ignore[arg-type]


def clopper_pearson(counts: Tensor, n: int, alpha: float) -> tuple[Tensor, Tensor]:
    """Two-sided Clopper-Pearson interval of level `1 - alpha` for each binomial count (float64).

    Args:
        counts: integer tensor of successes, each in [0, n], any shape.
        n: number of trials of every count.
        alpha: failure probability of each interval, in (0, 1).

    Returns:
        (lower, upper), float64 tensors shaped like `counts`, on its device.

    Examples:
        >>> lo, hi = clopper_pearson(torch.tensor([0, 5, 10]), 10, 0.05)
        >>> [round(v, 4) for v in lo.tolist()], [round(v, 4) for v in hi.tolist()]
        ([0.0, 0.1871, 0.6915], [0.3085, 0.8129, 1.0])
    """
    import numpy as np
    from scipy.special import betaincinv  # scipy ships with scikit-learn, a dependency

    check_positive(n, "n", integer=True)
    alpha = check_alpha(alpha)
    if counts.dtype.is_floating_point or counts.dtype == torch.bool:
        raise TypeError(f"`counts` must be an integer tensor, got dtype {counts.dtype}")
    low, high = (int(counts.min()), int(counts.max())) if counts.numel() else (0, 0)
    if low < 0 or high > n:
        raise ValueError(f"`counts` must lie in [0, n] = [0, {n}], got [{low}, {high}]")
    c = counts.detach().cpu().double().numpy()
    with np.errstate(all="ignore"):  # the edge counts 0 and n are set below
        lower = betaincinv(c, n - c + 1, alpha / 2)
        upper = betaincinv(c + 1, n - c, 1 - alpha / 2)
    lower[c == 0] = 0.0
    upper[c == n] = 1.0
    to = dict(dtype=torch.float64, device=counts.device)
    return torch.as_tensor(lower, **to), torch.as_tensor(upper, **to)  # type: ignore[arg-type]


def simultaneous_bounds(counts: Tensor, n: int, alpha: float) -> tuple[Tensor, Tensor]:
    """Clopper-Pearson bounds for every pixel of maps (B, H, W) that hold for ALL the pixels of
    an image at once with probability >= 1 - `alpha`: each pixel gets level alpha / (H * W).

    Examples:
        >>> counts = torch.tensor([[[10, 0], [3, 7]]])
        >>> lo, hi = simultaneous_bounds(counts, 10, 0.05)
        >>> bool((lo <= counts / 10).all() and (counts / 10 <= hi).all())
        True
        >>> torch.equal(lo, clopper_pearson(counts, 10, 0.05 / 4)[0])
        True
    """
    if counts.dim() != 3:
        raise ValueError(f"`counts` must have shape (B, H, W), got {tuple(counts.shape)}")
    return clopper_pearson(counts, n, check_alpha(alpha) / math.prod(counts.shape[1:]))
