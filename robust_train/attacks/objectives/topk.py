"""The top-k attack: push importance out of the clean map's k most important pixels."""

from __future__ import annotations

from torch import Tensor

from robust_train.attacks.objectives.base import FragilityObjective, register_objective
from robust_train.explain.maps import normalize_map


@register_objective("topk")
class TopK(FragilityObjective):
    """Ascend -sum_{i in B} I(x)_i, with I the sum-normalised map and B the clean top-k set.

    Ghorbani, Abid & Zou (AAAI 2019), "top-k attack"; iterates are ranked by lower top-k
    intersection, ties by lower Spearman correlation (the base score).

    Examples:
        >>> import torch
        >>> clean = torch.arange(4.0).view(1, 2, 2)
        >>> TopK(clean, k=1, measure_k=1).ascent_value(clean, slice(0, 1))
        tensor([-0.5000])
    """

    uses_attack_k = True

    def ascent_value(self, maps: Tensor, rows: slice) -> Tensor:
        weights = normalize_map(maps, "sum")
        return -(weights * self.clean_topk[rows]).flatten(1).sum(1)
