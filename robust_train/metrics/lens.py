"""torchmetrics shell around `lens_topk_intersection` (Kamath et al., AAAI 2024)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from robust_train.core.validation import check_positive
from robust_train.explain.lens import check_window, lens_topk_intersection

__all__ = ["LENSTopkIntersection"]


class LENSTopkIntersection(Metric):
    """Mean locality-sensitive top-k intersection of pairs of importance maps.

    `update(map_a, map_b)` adds the per-pair values of `lens_topk_intersection(map_a, map_b, k,
    window=window)` (`map_a` the reference, e.g. clean maps; `map_b` e.g. attacked ones); pairs
    where both maps are all zero (NaN) are left out and counted in `n_undefined`. State: a sum
    and two counts, fixed size, reduced with "sum" across processes.

    Args:
        k: number of top pixels.
        window: neighbourhood radius in pixels (1: the 3x3 window of Kamath et al.; 0: top-k
            intersection).
        **kwargs: torchmetrics Metric options.

    Examples:
        >>> metric = LENSTopkIntersection(k=1)
        >>> a = torch.zeros(2, 4, 4)
        >>> a[:, 1, 1] = 1.0
        >>> metric.update(a, a.roll(1, dims=1))
        >>> float(metric.compute())
        1.0
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False
    total: Tensor
    count: Tensor
    n_undefined: Tensor

    def __init__(self, k: int, *, window: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_positive(k, "k", integer=True)
        check_window(window)
        self.k, self.window = k, window
        self.add_state("total", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("n_undefined", torch.tensor(0), dist_reduce_fx="sum")

    def update(self, map_a: Tensor, map_b: Tensor) -> None:
        """Add the pairs (B, H, W) of `map_a` and `map_b`."""
        values = lens_topk_intersection(map_a, map_b, self.k, window=self.window)
        valid = ~torch.isnan(values)
        self.total += values[valid].double().sum().to(self.total.device)
        self.count += valid.sum().to(self.count.device)
        self.n_undefined += (~valid).sum().to(self.n_undefined.device)

    def compute(self) -> Tensor:
        """The mean over the defined pairs (NaN when there were none)."""
        return self.total / self.count
