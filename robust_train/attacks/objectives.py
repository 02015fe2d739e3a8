"""The four fragility objectives: what the attack ascends, and how its iterates are ranked.

Ghorbani, Abid & Zou, "Interpretation of Neural Networks is Fragile" (AAAI 2019). With I(x) the
importance map normalised to sum 1:
- "topk": ascend -sum_{i in B} I(x)_i, B the k most important pixels of the clean map (push
  importance out of the original top-k set); iterates ranked by lower top-k intersection.
- "mass_center": ascend ||C(x) - C(x_0)||_2, C the center of mass; ranked by larger center shift.
- "targeted": ascend sum_i I(x)_i T_i for a binary region T; ranked by larger mass inside T.
- "random_sign": no gradient, d = sign(N(0, I)); ranked like "topk" (the noise baseline).
Ties in the top-k intersection (a discrete value) are broken by lower Spearman correlation.
"""

from __future__ import annotations

import torch
from torch import Tensor

from robust_train.explain.maps import normalize_map
from robust_train.metrics.functional.similarity import (
    center_of_mass,
    center_of_mass_shift,
    spearman_correlation,
    topk_intersection,
    topk_mask,
)

OBJECTIVES = ("topk", "mass_center", "targeted", "random_sign")

# Below this center distance (pixels) the gradient of the distance vanishes; see `ascent_value`.
_TIE_DISTANCE = 1e-6


class FragilityObjective:
    """Attack objective bound to one batch of clean maps (from the original model).

    Args:
        name: one of OBJECTIVES.
        clean_map: importance maps (B, H, W) of the clean inputs under the original model.
        k: size of the top-k set B that the "topk" objective empties.
        measure_k: k of the top-k intersection used to rank iterates.
        region: bool (B, H, W) target region for "targeted", else None.
        center_direction: unit vectors (B, 2); while the attacked center still coincides with the
            clean one (distance ~ 0, where the distance has a zero gradient) "mass_center" ascends
            the projection of the center shift on them instead.
    """

    def __init__(self, name: str, clean_map: Tensor, k: int, measure_k: int,
                 region: Tensor | None = None, center_direction: Tensor | None = None) -> None:
        self.name = name
        self.clean_map = clean_map
        self.measure_k = measure_k
        self.region = region
        self.clean_topk = topk_mask(clean_map, k)
        self.clean_center = center_of_mass(clean_map)
        self.center_direction = center_direction

    @property
    def needs_gradient(self) -> bool:
        return self.name != "random_sign"

    def ascent_value(self, maps: Tensor, rows: slice) -> Tensor:
        """Differentiable per-sample value (b,) to ascend, for the maps of batch rows `rows`."""
        weights = normalize_map(maps, "sum")
        if self.name == "topk":
            return -(weights * self.clean_topk[rows]).flatten(1).sum(1)
        if self.name == "targeted":
            assert self.region is not None
            return (weights * self.region[rows]).flatten(1).sum(1)
        if self.name != "mass_center":
            raise ValueError(f"objective {self.name!r} has no gradient")
        offset = center_of_mass(weights) - self.clean_center[rows]
        distance = (offset.square().sum(1) + 1e-24).sqrt()
        if self.center_direction is None:
            return distance
        projection = (offset * self.center_direction[rows]).sum(1)
        return torch.where(distance.detach() > _TIE_DISTANCE, distance, projection)

    def region_mass(self, maps: Tensor) -> Tensor:
        """Fraction of each (sum-normalised) map inside the target region, (B,)."""
        assert self.region is not None
        return (normalize_map(maps, "sum") * self.region).flatten(1).sum(1)

    def score(self, maps: Tensor) -> tuple[Tensor, Tensor]:
        """Rank maps of the original model: (primary, secondary), both lower-is-better, (B,)."""
        if self.name in ("topk", "random_sign"):
            return (topk_intersection(self.clean_map, maps, self.measure_k),
                    spearman_correlation(self.clean_map, maps))
        zeros = torch.zeros(maps.shape[0], dtype=maps.dtype, device=maps.device)
        if self.name == "mass_center":
            shift = center_of_mass_shift(self.clean_map, maps)
            return -torch.nan_to_num(shift, nan=-1.0), zeros
        return -self.region_mass(maps), zeros

    @staticmethod
    def better(new: tuple[Tensor, Tensor], best: tuple[Tensor, Tensor]) -> Tensor:
        """(B,) bool: strictly better, lexicographically; NaN never wins."""
        return (new[0] < best[0]) | ((new[0] == best[0]) & (new[1] < best[1]))
