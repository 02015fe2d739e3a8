"""Confidence interval for the mean of per-image values (Brocki & Chung report the fidelity
estimate with one over images).

    mean +- q * s / sqrt(n),  s = sample standard deviation (n - 1 in the denominator)

with q the (1 + level) / 2 quantile of Student's t with n - 1 degrees of freedom (method "t", the
default: exact for normal values, slightly wider than the normal interval for small n) or of the
standard normal (method "normal"). With n < 2 the bounds are NaN.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from robust_train.core.validation import check_choice, check_finite

__all__ = ["MeanInterval", "mean_confidence_interval", "interval_from_moments"]


class MeanInterval(NamedTuple):
    """Mean of the values and the low/high bounds of its confidence interval (0-d tensors)."""

    mean: Tensor
    low: Tensor
    high: Tensor


def interval_from_moments(
    count: Tensor | float,
    total: Tensor,
    total_sq: Tensor,
    *,
    level: float = 0.95,
    method: str = "t",
) -> MeanInterval:
    """The interval from n, sum and sum of squares (what a torchmetrics state can hold).

    Examples:
        >>> v = torch.tensor([1.0, 2.0, 3.0])
        >>> ci = interval_from_moments(3, v.sum(), (v**2).sum(), method="normal")
        >>> [round(float(t), 3) for t in ci]
        [2.0, 0.868, 3.132]
    """
    check_choice(method, "method", ("t", "normal"))
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"`level` must lie in (0, 1), got {level!r}")
    total = torch.as_tensor(total, dtype=torch.float64)
    n = float(count)
    mean = total / n if n > 0 else torch.tensor(math.nan, dtype=torch.float64)
    if n < 2:
        nan = torch.tensor(math.nan, dtype=torch.float64)
        return MeanInterval(mean, nan, nan)
    variance = ((torch.as_tensor(total_sq, dtype=torch.float64) - n * mean**2) / (n - 1)).clamp_min(
        0
    )
    half = _quantile(level, n, method) * variance.sqrt() / math.sqrt(n)
    return MeanInterval(mean, mean - half, mean + half)


def mean_confidence_interval(
    values: Tensor, level: float = 0.95, method: str = "t"
) -> MeanInterval:
    """Mean of `values` (N,) with a `level` confidence interval ("t" or "normal"), as float64.

    Examples:
        >>> ci = mean_confidence_interval(torch.tensor([0.1, 0.3, 0.2, 0.4]))
        >>> round(float(ci.mean), 4), bool(ci.low < ci.mean < ci.high)
        (0.25, True)
    """
    if not isinstance(values, Tensor) or values.dim() != 1:
        shape = tuple(values.shape) if isinstance(values, Tensor) else type(values).__name__
        raise ValueError(f"`values` must be a 1-d tensor of per-image values, got {shape}")
    if values.numel() == 0:
        raise ValueError("`values` is empty: no images to average")
    check_finite(values, "values")
    v = values.detach().to(torch.float64)
    ci = interval_from_moments(v.numel(), v.sum(), (v * v).sum(), level=level, method=method)
    return MeanInterval(*(t.to(values.device) for t in ci))


def _quantile(level: float, n: float, method: str) -> float:
    p = (1 + level) / 2
    if method == "normal":
        return float(
            torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(p, dtype=torch.float64))
        )
    from scipy.stats import t  # scipy ships with scikit-learn, a dependency

    return float(t.ppf(p, n - 1))
