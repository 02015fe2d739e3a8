"""Ground-truth localisation as torchmetrics Metrics: dataset means of the relevance mass
accuracy, the relevance rank accuracy and the pointing game (`functional.localisation`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import Tensor
from torchmetrics import Metric

from robust_train.core.validation import check_non_negative
from robust_train.metrics.functional.localisation import (
    pointing_game,
    relevance_mass_accuracy,
    relevance_rank_accuracy,
)

__all__ = ["PointingGame", "RelevanceMassAccuracy", "RelevanceRankAccuracy"]


class _MaskedMapMean(Metric):
    """Mean over images of a per-image localisation value; NaN values (an empty mask, an
    all-zero map) are left out and counted in `n_unmeasured`. State: a sum and two counts,
    reduced with "sum" across processes."""

    is_differentiable = False
    higher_is_better = True
    full_state_update = False
    total: Tensor
    count: Tensor
    n_unmeasured: Tensor
    measure: ClassVar[Callable[..., Tensor]]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("total", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("n_unmeasured", torch.tensor(0), dist_reduce_fx="sum")

    def values(self, maps: Tensor, masks: Tensor) -> Tensor:
        """The per-image values of a batch (B,)."""
        return type(self).measure(maps, masks)

    def update(self, maps: Tensor, masks: Tensor) -> None:
        """Add a batch: importance maps (B, H, W), non-negative, and masks (B, H, W)."""
        values = self.values(maps, masks).to(self.total.device)
        valid = ~torch.isnan(values)
        self.total += values[valid].double().sum()
        self.count += valid.sum()
        self.n_unmeasured += (~valid).sum()

    def compute(self) -> Tensor:
        """The mean over the measured images (NaN when none was)."""
        return (self.total / self.count).float()


class RelevanceMassAccuracy(_MaskedMapMean):
    """Mean share of the map's mass inside the object's mask (Arras et al. 2022).

    Examples:
        >>> metric = RelevanceMassAccuracy()
        >>> metric.update(torch.tensor([[[1.0, 3.0]]]), torch.tensor([[[True, False]]]))
        >>> metric.update(torch.tensor([[[1.0, 1.0]]]), torch.tensor([[[True, True]]]))
        >>> metric.compute()
        tensor(0.6250)
    """

    measure = staticmethod(relevance_mass_accuracy)


class RelevanceRankAccuracy(_MaskedMapMean):
    """Mean share of the map's K highest pixels inside the mask, K its size (Arras et al. 2022).

    Examples:
        >>> metric = RelevanceRankAccuracy()
        >>> metric.update(torch.tensor([[[4.0, 3.0, 2.0]]]), torch.tensor([[[True, False, True]]]))
        >>> metric.compute()
        tensor(0.5000)
    """

    measure = staticmethod(relevance_rank_accuracy)


class PointingGame(_MaskedMapMean):
    """Share of maps whose maximum falls on the mask, or within `tolerance` pixels of it (Zhang
    et al. 2018).

    Args:
        tolerance: distance in pixels a maximum may lie off the mask and still count.
        **kwargs: torchmetrics Metric options.

    Raises:
        ValueError: a negative `tolerance`.

    Examples:
        >>> metric = PointingGame()
        >>> metric.update(torch.tensor([[[0.0, 2.0]], [[2.0, 0.0]]]),
        ...               torch.tensor([[[False, True]], [[False, True]]]))
        >>> metric.compute()
        tensor(0.5000)
    """

    measure = staticmethod(pointing_game)

    def __init__(self, tolerance: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_non_negative(tolerance, "tolerance")
        self.tolerance = float(tolerance)

    def values(self, maps: Tensor, masks: Tensor) -> Tensor:
        return pointing_game(maps, masks, tolerance=self.tolerance)
