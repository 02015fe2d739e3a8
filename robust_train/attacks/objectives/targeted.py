"""The targeted attack: pull importance into a given region of the image."""

from __future__ import annotations

import torch
from torch import Tensor

from robust_train.attacks.objectives.base import FragilityObjective, Score, register_objective
from robust_train.explain.maps import normalize_map


@register_objective("targeted")
class Targeted(FragilityObjective):
    """Ascend sum_i I(x)_i T_i for a bool region T; ranked by larger mass inside T.

    Ghorbani, Abid & Zou (AAAI 2019), "targeted attack" (their T is a region the attacker picks;
    `robust_train.attacks.defaults.target_region` gives the suite's default, the top-left quarter).

    Examples:
        >>> clean = torch.ones(1, 2, 2)
        >>> region = torch.tensor([[[True, False], [False, False]]])
        >>> Targeted(clean, k=1, measure_k=1, region=region).ascent_value(clean, slice(0, 1))
        tensor([0.2500])
    """

    needs_region = True
    report_metrics = ("region_mass", "topk_intersection", "lens_topk")

    def ascent_value(self, maps: Tensor, rows: slice) -> Tensor:
        assert self.region is not None
        return (normalize_map(maps, "sum") * self.region[rows]).flatten(1).sum(1)

    def score(self, maps: Tensor) -> Score:
        zeros = torch.zeros(maps.shape[0], dtype=maps.dtype, device=maps.device)
        return -self.region_mass(maps), zeros
