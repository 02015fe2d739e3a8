"""The mass-center attack: move the center of mass of the map away from the clean one."""

from __future__ import annotations

import torch
from torch import Tensor

from robust_train.attacks.objectives.base import FragilityObjective, Score, register_objective
from robust_train.explain.maps import normalize_map
from robust_train.explain.similarity import center_of_mass, center_of_mass_shift

# Below this center distance (pixels) the gradient of the distance vanishes; see `ascent_value`.
_TIE_DISTANCE = 1e-6


@register_objective("mass_center")
class MassCenter(FragilityObjective):
    """Ascend ||C(x) - C(x_0)||_2, C the center of mass; ranked by larger center shift.

    Ghorbani, Abid & Zou (AAAI 2019), "mass-center attack". While the attacked center still
    coincides with the clean one (distance ~ 0, where the distance has a zero gradient), the
    projection of the shift on a random unit vector, drawn at each restart, is ascended instead.

    Examples:
        >>> clean = torch.rand(2, 4, 4)
        >>> objective = MassCenter(clean, k=4, measure_k=4)
        >>> objective.start_restart(0, torch.manual_seed(0))
        >>> objective.ascent_value(clean, slice(0, 2)).abs().max() < 1e-6
        tensor(True)
    """

    report_metrics = ("center_shift", "topk_intersection", "lens_topk", "spearman", "kendall")

    def __init__(self, clean_map: Tensor, **kwargs: object) -> None:
        super().__init__(clean_map, **kwargs)  # type: ignore[arg-type]
        self.clean_center = center_of_mass(clean_map)
        self.center_direction: Tensor | None = None

    def start_restart(self, restart: int, generator: torch.Generator) -> None:
        batch = self.clean_map.shape[0]
        unit = torch.randn(batch, 2, generator=generator, device=generator.device)
        unit = unit.to(self.clean_map.device, self.clean_map.dtype)
        self.center_direction = unit / unit.norm(dim=1, keepdim=True)

    def ascent_value(self, maps: Tensor, rows: slice) -> Tensor:
        offset = center_of_mass(normalize_map(maps, "sum")) - self.clean_center[rows]
        distance = (offset.square().sum(1) + 1e-24).sqrt()
        if self.center_direction is None:
            return distance
        projection = (offset * self.center_direction[rows]).sum(1)
        return torch.where(distance.detach() > _TIE_DISTANCE, distance, projection)

    def score(self, maps: Tensor) -> Score:
        zeros = torch.zeros(maps.shape[0], dtype=maps.dtype, device=maps.device)
        shift = center_of_mass_shift(self.clean_map, maps)
        return -torch.nan_to_num(shift, nan=-1.0), zeros
